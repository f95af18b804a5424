"""Support for the audit tests: throw-away databases (tampering needs a log nobody else shares) and
the `capreg` CLI run as a separate process, as an operator runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import asynccontextmanager
from datetime import UTC
from pathlib import Path

ROOT = Path(__file__).parent.parent
# An event of two tenants is an entry in each chain (docs/audit.md#chains): a condition on audit_events
# keeping one row per event (the first entry), for tests that count events rather than entries.
ONE_ROW_PER_EVENT = (
    "(event_id IS NULL OR seq = (SELECT min(o.seq) FROM audit_events o WHERE o.event_id = audit_events.event_id))"
)


@asynccontextmanager
async def fresh_database(server_url: str, *, migrated: bool = True):
    """A new database on the test server (migrated, with a signing key, unless `migrated` is False),
    dropped afterwards (tests.conftest.scratch_database)."""
    from db.migrate import apply_migrations
    from db.pool import connect
    from registry.core.signing_keys import ensure_signing_key
    from tests.conftest import scratch_database

    async with scratch_database(server_url, "audit") as url:
        if migrated:
            conn = await connect(url)
            try:
                await apply_migrations(conn)
                await ensure_signing_key(conn)
            finally:
                await conn.close()
        yield url


def capreg_cli(database_url: str, *args: str, home: Path | None = None) -> subprocess.CompletedProcess:
    """`python -m registry.cli ARGS` with DATABASE_URL set; returns the finished process (any exit code)."""
    env = {**os.environ, "DATABASE_URL": database_url}
    if home is not None:
        env["CAPREG_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "registry.cli", *args], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT
    )


async def append_legacy_events(conn, events) -> None:
    """Append events as capreg did before migration 0009 (one chain, one head row): the old code path,
    for logs that existed before chains per tenant. Only possible before 0009 freezes audit_head."""
    from datetime import datetime

    from db.audit_events import event_hash

    async with conn.transaction():
        head = await conn.fetchrow("SELECT seq, hash FROM audit_head WHERE id = 1 FOR UPDATE")
        seq, prev = head["seq"], head["hash"]
        at = datetime.now(UTC)
        for event in events:
            seq += 1
            digest = event_hash(prev, seq, at, event)
            await conn.execute(
                "INSERT INTO audit_events (seq, at, tenant, actor_tenant, type, actor, on_behalf_of, ref, scopes, outcome, "
                "reason, trace_id, prev_hash, hash, actor_issuer, request_id) "
                "VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16)",
                seq,
                at,
                event.tenant,
                event.actor_tenant,
                event.type,
                event.actor,
                event.on_behalf_of,
                event.ref,
                list(event.scopes),
                event.outcome,
                event.reason,
                event.trace_id,
                prev,
                digest,
                event.actor_issuer,
                event.request_id,
            )
            prev = digest
        await conn.execute("UPDATE audit_head SET seq = $1, hash = $2 WHERE id = 1", seq, prev)
