"""Tamper evidence, shown by tampering: as a superuser with the append-only triggers disabled, in a
throw-away database, then running the real `capreg audit verify` (exit code and the first bad seq or
chainSeq). The log holds events of both eras: four written by the old code path before migration
0009 (the old single chain, seq 1-4), then four entries of tenant acme's chain (chainSeq 1-4, seq
5-8), anchored at the old head. Also the production role set-up from README.md ("Production database
roles"), run as written."""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path

import asyncpg
import httpx
import pytest

from db.audit import append_events
from db.audit_events import AuditEvent, entry_hash
from db.pool import connect
from registry.audit.chain import verify_stored_chain
from tests.audit_support import append_legacy_events, capreg_cli, fresh_database

README = Path(__file__).parents[2] / "README.md"

# Eight events in three transactions, with the awkward values: nulls, several scopes, non-ASCII text.
# The first two transactions are written by the old code path, before migration 0009 and without
# actorIssuer and requestId (hashed as they always were); the third, after it, carries them.
EVENTS = [
    [
        AuditEvent(
            type="agent.registered",
            outcome="allowed",
            tenant="acme",
            actor_tenant="acme",
            actor="ci",
            ref="acme/billing",
        )
    ],
    [
        AuditEvent(
            type="version.published",
            outcome="allowed",
            tenant="acme",
            actor_tenant="acme",
            actor="ci",
            ref="acme/billing/invoice.lookup@2.0.0",
            scopes=["invoice:read", "invoice:list"],
            trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
        ),
        AuditEvent(
            type="detail.denied",
            outcome="denied",
            tenant="acme",
            actor_tenant="globex",
            actor="router",
            ref="acme/billing/invoice.lookup@2.0.0",
            scopes=["invoice:read"],
            reason="data_location_denied",
        ),
        AuditEvent(
            type="detail.released",
            outcome="allowed",
            tenant="acme",
            actor_tenant="acme",
            actor="router",
            ref="acme/billing/invoice.lookup@2.0.0",
            reason=None,
        ),
    ],
    [
        AuditEvent(
            type="ticket.granted",
            outcome="allowed",
            tenant="acme",
            actor_tenant="acme",
            actor="router",
            on_behalf_of="user-19 (Zoë Ångström)",
            ref="acme/billing/invoice.lookup@2.0.0",
            scopes=["invoice:read"],
        ),
        AuditEvent(
            type="ticket.denied",
            outcome="denied",
            tenant="acme",
            actor_tenant="acme",
            actor="router",
            ref="acme/billing/invoice.lookup@2.0.0",
            scopes=["invoice:write"],
            reason="scope_escalation",
        ),
        AuditEvent(
            type="version.deprecated",
            outcome="allowed",
            tenant="acme",
            actor_tenant="acme",
            actor="admin",
            ref="acme/billing/invoice.lookup@2.0.0",
            actor_issuer="capreg",
            request_id="5d0b2c1e9a7f4e3b8c6d2a10",
        ),
        AuditEvent(
            type="version.retired",
            outcome="allowed",
            tenant="acme",
            actor_tenant="acme",
            actor="admin",
            ref="acme/billing/invoice.lookup@2.0.0",
            actor_issuer="https://idp.example.test/",
            request_id=None,
        ),
    ],
]
HASHED_COLUMNS = [
    "at",
    "tenant",
    "actor_tenant",
    "type",
    "actor",
    "on_behalf_of",
    "ref",
    "scopes",
    "outcome",
    "reason",
    "trace_id",
    "actor_issuer",
    "request_id",
    "prev_hash",
    "hash",
]
CHAIN_COLUMNS = ["chain", "chain_seq", "event_id"]


@pytest.fixture
async def log_url(server_url):
    """A fresh database holding EVENTS: seq 1-4 by the old code path, migrated, then acme's chain."""
    from db.migrate import apply_migrations
    from registry.core.signing_keys import ensure_signing_key

    async with fresh_database(server_url, migrated=False) as url:
        conn = await connect(url)
        try:
            await apply_migrations(conn, upto=8)
            await ensure_signing_key(conn)
            for batch in EVENTS[:2]:
                await append_legacy_events(conn, batch)
            await apply_migrations(conn)
            async with conn.transaction():
                await append_events(conn, EVENTS[2])
        finally:
            await conn.close()
        yield url


async def tamper(url: str, *statements: str) -> None:
    """Run statements as the superuser with every trigger on the audit tables disabled."""
    conn = await connect(url)
    try:
        await conn.execute("ALTER TABLE audit_events DISABLE TRIGGER ALL")
        await conn.execute("ALTER TABLE audit_checkpoints DISABLE TRIGGER ALL")
        await conn.execute("ALTER TABLE audit_head DISABLE TRIGGER ALL")
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


def verify(url: str, *args: str):
    return capreg_cli(url, "audit", "verify", *args)


def assert_broken_at(result, seq: int) -> None:
    """The old single chain's first bad seq is named."""
    assert result.returncode == 1, result.stdout + result.stderr
    assert re.search(rf"broken at seq {seq}\b", result.stdout), result.stdout


def assert_entry_broken_at(result, chain_seq: int, chain: str = "acme") -> None:
    """A tenant chain and its first bad chainSeq are named."""
    assert result.returncode == 1, result.stdout + result.stderr
    assert re.search(rf"audit chain {chain} broken at chainSeq {chain_seq}\b", result.stdout), result.stdout


async def test_an_untouched_log_verifies(log_url):
    result = verify(log_url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "intact: 8 events" in result.stdout and "1 tenant chain checked" in result.stdout


async def test_events_written_before_the_migration_stay_as_they_were_and_anchor_the_chain(log_url):
    conn = await connect(log_url)
    try:
        rows = await conn.fetch("SELECT seq, chain, chain_seq, prev_hash, hash FROM audit_events ORDER BY seq")
        old_head = await conn.fetchrow("SELECT seq, hash FROM audit_head")
        # The old chain's head is frozen: a process of the old version cannot fork it.
        with pytest.raises(asyncpg.PostgresError, match="frozen"):
            await conn.execute("UPDATE audit_head SET seq = seq + 1")
    finally:
        await conn.close()
    assert [(r["chain"], r["chain_seq"]) for r in rows] == [(None, None)] * 4 + [("acme", n) for n in (1, 2, 3, 4)]
    assert (old_head["seq"], old_head["hash"]) == (4, rows[3]["hash"])
    assert rows[4]["prev_hash"] == old_head["hash"]  # the tenant's chain starts after the old head


async def test_an_edited_row_is_named(log_url):
    await tamper(log_url, "UPDATE audit_events SET reason = 'scope_escalation' WHERE seq = 3")
    assert_broken_at(verify(log_url), 3)


async def test_an_edited_entry_is_named_by_its_chain_seq(log_url):
    await tamper(log_url, "UPDATE audit_events SET reason = 'edited' WHERE chain = 'acme' AND chain_seq = 2")
    assert_entry_broken_at(verify(log_url), 2)


async def test_a_deleted_row_is_named(log_url):
    await tamper(log_url, "DELETE FROM audit_events WHERE seq = 2")
    assert_broken_at(verify(log_url), 2)


async def test_a_deleted_entry_is_named(log_url):
    await tamper(log_url, "DELETE FROM audit_events WHERE chain = 'acme' AND chain_seq = 3")
    assert_entry_broken_at(verify(log_url), 3)


async def test_reordered_rows_are_named(log_url):
    await tamper(
        log_url,
        "UPDATE audit_events SET seq = -2 WHERE seq = 2",
        "UPDATE audit_events SET seq = 2 WHERE seq = 3",
        "UPDATE audit_events SET seq = 3 WHERE seq = -2",
    )
    assert_broken_at(verify(log_url), 2)


async def test_reordered_entries_are_named(log_url):
    await tamper(
        log_url,
        "UPDATE audit_events SET chain_seq = -2 WHERE chain = 'acme' AND chain_seq = 2",
        "UPDATE audit_events SET chain_seq = 2 WHERE chain = 'acme' AND chain_seq = 3",
        "UPDATE audit_events SET chain_seq = 3 WHERE chain = 'acme' AND chain_seq = -2",
    )
    assert_entry_broken_at(verify(log_url), 2)


@pytest.mark.parametrize("seq", [2, 7])  # an event of the old chain (no actorIssuer/requestId), and an entry with them
@pytest.mark.parametrize("column", HASHED_COLUMNS + CHAIN_COLUMNS)
async def test_an_edit_to_any_column_breaks_the_chain(log_url, column, seq):
    if column in CHAIN_COLUMNS and seq == 2:
        pytest.skip("events of the old chain have no chain columns")
    edits = {
        "at": "at + interval '1 microsecond'",
        "scopes": "ARRAY['invoice:list', 'invoice:read']",
        "prev_hash": "repeat('f', 64)",
        "hash": "repeat('f', 64)",
        "outcome": "'denied'",
        "chain_seq": "chain_seq + 10",
    }
    value = edits.get(column, "'x'")
    await tamper(log_url, f"UPDATE audit_events SET {column} = {value} WHERE seq = {seq}")
    conn = await connect(log_url)
    try:  # in process (the CLI runs the same function; the tests above run the CLI itself)
        report = await verify_stored_chain(conn, {})
    finally:
        await conn.close()
    assert report.breach is not None
    if seq == 2:
        assert report.breach.seq == seq
    else:  # acme's chainSeq 3 (seq 7); a moved entry is missed where it was
        assert (report.breach.chain, report.breach.chain_seq) == ("acme", 3), report.breach


async def test_the_hash_covers_every_column_of_audit_events(db):
    columns = await db.fetch(
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'audit_events' ORDER BY ordinal_position"
    )
    # seq is the position in the chain (checked as a link), not a field to edit: every other column is hashed.
    assert [c["column_name"] for c in columns] == [
        "seq",
        *HASHED_COLUMNS[:-4],
        "prev_hash",
        "hash",
        "actor_issuer",
        "request_id",
        *CHAIN_COLUMNS,
    ]


async def test_verification_does_not_depend_on_time_zones(log_url):
    import os
    import subprocess
    import sys

    for zone in ("Pacific/Kiritimati", "America/St_Johns"):
        env = {**os.environ, "DATABASE_URL": f"{log_url}{'&' if '?' in log_url else '?'}timezone={zone}", "TZ": zone}
        result = subprocess.run(
            [sys.executable, "-m", "registry.cli", "audit", "verify"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0 and "intact: 8 events" in result.stdout, result.stdout + result.stderr


async def test_tail_truncation_is_caught_by_the_head_row(log_url):
    await tamper(log_url, "DELETE FROM audit_events WHERE chain = 'acme' AND chain_seq > 2")
    assert_entry_broken_at(verify(log_url), 3)


REWIND_ACME = (
    "UPDATE audit_chain_heads SET chain_seq = 2, seq = 6, "
    "hash = (SELECT hash FROM audit_events WHERE chain = 'acme' AND chain_seq = 2) WHERE chain = 'acme'"
)


async def test_tail_truncation_with_a_rewound_head_is_caught_by_the_signed_checkpoint(log_url):
    assert capreg_cli(log_url, "audit", "checkpoint").returncode == 0
    await tamper(log_url, "DELETE FROM audit_events WHERE chain = 'acme' AND chain_seq > 2", REWIND_ACME)
    result = verify(log_url)
    assert_entry_broken_at(result, 3)
    assert "checkpoint covers chainSeq 4" in result.stdout


async def rewrite_from(url: str, chain_seq: int) -> None:
    """Edit acme's entry `chain_seq` and recompute every later link, as an attacker who knows the hash would."""
    conn = await connect(url)
    try:
        await conn.execute("ALTER TABLE audit_events DISABLE TRIGGER ALL")
        await conn.execute(
            "UPDATE audit_events SET outcome = 'allowed', reason = NULL WHERE chain = 'acme' AND chain_seq = $1",
            chain_seq,
        )
        rows = await conn.fetch(
            "SELECT * FROM audit_events WHERE chain = 'acme' AND chain_seq >= $1 ORDER BY chain_seq", chain_seq
        )
        prev = await conn.fetchval(
            "SELECT hash FROM audit_events WHERE chain = 'acme' AND chain_seq = $1", chain_seq - 1
        )
        for row in rows:
            event = AuditEvent(
                **{
                    k: row[k]
                    for k in (
                        "type",
                        "outcome",
                        "tenant",
                        "actor_tenant",
                        "actor",
                        "on_behalf_of",
                        "ref",
                        "scopes",
                        "reason",
                        "trace_id",
                        "actor_issuer",
                        "request_id",
                    )
                }
            )
            digest = entry_hash(
                prev,
                chain="acme",
                chain_seq=row["chain_seq"],
                event_id=row["event_id"],
                seq=row["seq"],
                at=row["at"],
                event=event,
            )
            await conn.execute(
                "UPDATE audit_events SET prev_hash = $1, hash = $2 WHERE seq = $3", prev, digest, row["seq"]
            )
            prev = digest
        await conn.execute("UPDATE audit_chain_heads SET hash = $1 WHERE chain = 'acme'", prev)
    finally:
        await conn.close()


async def test_a_rewritten_and_rehashed_log_is_caught_by_checkpoints(log_url, tmp_path):
    made = capreg_cli(log_url, "audit", "checkpoint")
    assert made.returncode == 0, made.stderr
    kept = tmp_path / "checkpoint.json"  # what a monitor fetched from /v1/audit/checkpoints/latest
    kept.write_text(made.stdout)
    assert json.loads(made.stdout)["seq"] == 8 and json.loads(made.stdout)["chains"] == 1

    await rewrite_from(log_url, 2)
    result = verify(log_url)
    assert_entry_broken_at(result, 4)
    assert "rewritten at or before" in result.stdout

    # An attacker who also removes the stored checkpoints is still caught by a copy kept elsewhere;
    # without one, a consistently rehashed log cannot be told apart (hence: keep checkpoints outside).
    await tamper(log_url, "DELETE FROM audit_checkpoints")
    assert verify(log_url).returncode == 0
    caught = verify(log_url, "--checkpoint", str(kept))
    assert caught.returncode == 1 and "no longer stored" in caught.stdout, caught.stdout


async def test_checkpoint_refuses_to_sign_a_broken_log(log_url):
    await tamper(log_url, "UPDATE audit_events SET actor = 'someone' WHERE chain = 'acme' AND chain_seq = 3")
    refused = capreg_cli(log_url, "audit", "checkpoint")
    assert (
        refused.returncode == 1 and "no checkpoint signed: audit chain acme broken at chainSeq 3" in refused.stdout
    ), refused.stdout


async def test_checkpoint_refuses_to_sign_a_log_that_lost_its_last_signed_head(log_url):
    assert capreg_cli(log_url, "audit", "checkpoint").returncode == 0
    await tamper(log_url, "DELETE FROM audit_events WHERE chain = 'acme' AND chain_seq > 2", REWIND_ACME)
    refused = capreg_cli(log_url, "audit", "checkpoint")
    assert refused.returncode == 1 and "no checkpoint signed" in refused.stdout, refused.stdout


async def test_an_unreachable_database_is_not_reported_as_tampering(server_url):
    result = verify(
        server_url.rsplit("/", 1)[0] + "/capreg_no_such_database_" + secrets.token_hex(3)
        if "?" not in server_url
        else server_url.partition("?")[0].rsplit("/", 1)[0] + "/capreg_no_such_db?" + server_url.partition("?")[2]
    )
    assert result.returncode == 2, result.stdout + result.stderr


def readme_sql(heading: str) -> list[str]:
    """The ```sql blocks of a README section, as written."""
    section = README.read_text().split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sql\n(.*?)```", section, re.S)


def as_role(url: str, role: str) -> str:
    """The URL with a session role: the superuser connects, then acts with `role`'s privileges only."""
    return f"{url}{'&' if '?' in url else '?'}role={role}"


async def test_production_roles_refuse_edits_even_to_the_application(server_url):
    """README's role set-up, run as written: the application role appends to the log and advances its
    head, but UPDATE, DELETE and TRUNCATE fail (privileges first, the triggers behind them)."""
    from auth.tokens import mint_caller_token
    from db.migrate import apply_migrations
    from registry.app import create_app
    from registry.config import Settings
    from registry.core.signing_keys import ensure_signing_key
    from tests.conftest import example

    superuser_setup, owner_grants = readme_sql("Production database roles")
    suffix = secrets.token_hex(3)
    owner, app = f"capreg_owner_{suffix}", f"capreg_app_{suffix}"

    def named(sql: str) -> str:
        return sql.replace("capreg_owner", owner).replace("capreg_app", app)

    admin = await asyncpg.connect(server_url)
    try:
        # The superuser block; the test brings its own database, so the database statements adapt.
        for statement in named(superuser_setup).split(";"):
            if statement.strip().startswith("CREATE ROLE"):
                await admin.execute(statement)
        async with fresh_database(server_url, migrated=False) as url:
            database = url.partition("?")[0].rsplit("/", 1)[1]
            await admin.execute(f'ALTER DATABASE "{database}" OWNER TO {owner}')

            # `capreg migrate` as the owner, then the grants block as the owner.
            conn = await connect(as_role(url, owner))
            try:
                await apply_migrations(conn)
                await ensure_signing_key(conn)
                await conn.execute(named(owner_grants))
                assert await conn.fetchval("SELECT tableowner FROM pg_tables WHERE tablename = 'audit_events'") == owner
            finally:
                await conn.close()

            app_url = as_role(url, app)
            conn = await connect(app_url)
            try:
                assert await conn.fetchval("SELECT current_user") == app
                async with conn.transaction():  # what the application does: append, advance the head
                    await append_events(conn, [AuditEvent(type="agent.registered", outcome="allowed", tenant="acme")])
                assert await conn.fetchval("SELECT count(*) FROM audit_events") == 1
                for statement in (
                    "UPDATE audit_events SET reason = 'edited'",
                    "DELETE FROM audit_events",
                    "TRUNCATE audit_events",
                    "ALTER TABLE audit_events DISABLE TRIGGER ALL",
                    "UPDATE audit_checkpoints SET hash = 'x'",
                    "DELETE FROM audit_checkpoints",
                    "DELETE FROM audit_head",
                    "UPDATE schema_migrations SET sha256 = 'x'",
                ):
                    with pytest.raises(asyncpg.PostgresError, match="permission denied|must be owner|append-only"):
                        await conn.execute(statement)
            finally:
                await conn.close()

            # The whole application runs as that role: start-up, a registration, a signed checkpoint.
            application = create_app(Settings(database_url=app_url, checkpoint_interval=0))
            async with application.lifespan():
                keyring = application.state.registry.keyring
                token = mint_caller_token(
                    keyring,
                    issuer="capreg",
                    audience="capreg",
                    tenant="acme",
                    sub="ci",
                    scopes=["registry:publish"],
                    ttl=60,
                )
                transport = httpx.ASGITransport(app=application)
                async with httpx.AsyncClient(transport=transport, base_url="http://registry.test") as http:
                    put = await http.put(
                        "/v1/agents/acme/billing-agent",
                        json=example("billing-agent.json"),
                        headers={"Authorization": f"Bearer {token}"},
                    )
                    assert put.status_code == 201, put.text
                    latest = await http.get("/v1/audit/checkpoints/latest")
                    assert latest.status_code == 200 and latest.json()["seq"] == 4, latest.text
            result = verify(app_url)
            assert result.returncode == 0, result.stdout + result.stderr
    finally:
        for role in (app, owner):
            await admin.execute(f"DROP ROLE IF EXISTS {role}")
        await admin.close()
