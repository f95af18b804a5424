"""What the server does by itself: the change feed announces a future-effective version only once
discovery shows it, and records past CAPREG_RETENTION_DAYS are pruned (never the audit log)."""

from __future__ import annotations

import asyncio
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from registry.config import Settings
from tests.conftest import running_app
from tests.ticket_support import card, register_finance, skill


async def test_the_feed_never_announces_a_version_before_discovery_shows_it(live_server, mint, db, tenant):
    base, _, _ = live_server
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        start = await db.fetchval("SELECT seq FROM change_head")
        # Far enough ahead that the checks before it finish first on a loaded machine (2 s was not).
        effective = datetime.now(UTC) + timedelta(seconds=6)
        body = card(
            [
                skill("future.thing", "1.0.0", ["x:read"]),
                skill("later.thing", "2.0.0", ["x:read"], effectiveAt=effective.isoformat()),
            ],
            visibility="public",
        )
        published = await http.put(
            f"/v1/agents/{tenant}/agent", json=body, headers=mint(tenant, "p", "registry:publish")
        )
        assert published.status_code == 201, published.text
        later = f"{tenant}/agent/later.thing@2.0.0"

        async def feed() -> list[tuple[str, str]]:
            items = (await http.get("/v1/changes", params={"after": start, "limit": 1000})).json()["items"]
            return [(c["kind"], c["ref"]) for c in items if c["ref"].startswith(f"{tenant}/")]

        async def discoverable() -> bool:
            page = (await http.get("/v1/capabilities", params={"tenant": tenant})).json()
            return any(item["id"] == "later.thing" for item in page["items"])

        # Anonymous, then as the tenant itself: neither feed lists the version discovery hides.
        assert ("version.published", f"{tenant}/agent/future.thing@1.0.0") in await feed()
        assert all(ref != later for _, ref in await feed()) and not await discoverable()
        own = (
            await http.get("/v1/changes", params={"after": start}, headers=mint(tenant, "r", "registry:read"))
        ).json()
        assert all(c["ref"] != later for c in own["items"])
        assert datetime.now(UTC) < effective, "the checks before effectiveAt ran past it: inconclusive"
        # A reader long-polling from the head hears of it once it is in force: `version.effective`.
        head = await db.fetchval("SELECT seq FROM change_head")
        deadline = time.monotonic() + 12
        announced = []
        while not announced and time.monotonic() < deadline:
            page = (await http.get("/v1/changes", params={"after": head, "wait": 2})).json()
            announced = [c for c in page["items"] if c["ref"] == later]
            head = page["next"]
        assert [c["kind"] for c in announced] == ["version.effective"]
        assert datetime.now(UTC) >= effective and await discoverable()


async def test_expired_idempotency_keys_and_old_approvals_are_pruned_not_the_audit_log(
    database_url, client, mint, db, tenant
):
    await register_finance(client, mint, tenant)
    old, fresh = "p-" + uuid.uuid4().hex, "p-" + uuid.uuid4().hex
    await db.execute(
        """INSERT INTO ticket_idempotency (principal, idem_key, body_hash, created_at)
           VALUES ($1, 'k', 'h', now() - interval '25 hours'), ($2, 'k', 'h', now() - interval '1 hour')""",
        old,
        fresh,
    )
    approvals = await approvals_of_every_age(db, tenant)
    audit_count = await db.fetchval("SELECT count(*) FROM audit_events")
    # A server starting up prunes at once (then every few minutes).
    settings = Settings(
        database_url=database_url, home=Path(tempfile.mkdtemp(prefix="capreg-home-")), retention_days=30
    )
    async with running_app(settings):
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and await db.fetchval(
            "SELECT count(*) FROM ticket_idempotency WHERE principal = $1", old
        ):
            await asyncio.sleep(0.1)
    assert await db.fetchval("SELECT count(*) FROM ticket_idempotency WHERE principal = $1", old) == 0
    assert await db.fetchval("SELECT count(*) FROM ticket_idempotency WHERE principal = $1", fresh) == 1
    left = {r["approval_id"] for r in await db.fetch("SELECT approval_id FROM approvals WHERE tenant = $1", tenant)}
    assert left == {approvals["pending"], approvals["decided recently"], approvals["expired recently"]}
    assert await db.fetchval("SELECT count(*) FROM audit_events") >= audit_count


async def approvals_of_every_age(db, tenant: str) -> dict[str, str]:
    """Approvals on a capability of `tenant` in every state that matters for a 30-day retention."""
    cases = {
        "pending": ("pending", "now() + interval '1 hour'", "NULL"),
        "decided recently": ("denied", "now() - interval '1 day'", "now() - interval '1 day'"),
        "expired recently": ("pending", "now() - interval '1 day'", "NULL"),
        "decided long ago": ("approved", "now() - interval '40 days'", "now() - interval '40 days'"),
        "expired long ago": ("pending", "now() - interval '31 days'", "NULL"),
        "denied long ago, expiry later": ("denied", "now() + interval '1 hour'", "now() - interval '31 days'"),
    }
    ids = {}
    for label, (status, expires, decided) in cases.items():
        ids[label] = approval_id = uuid.uuid4().hex
        await db.execute(
            f"""INSERT INTO approvals (approval_id, status, tenant, agent_id, skill_id, version, ref, requester,
                                       requester_tenant, scopes, request, created_at, expires_at, decided_at)
                SELECT $1, $2, tenant, agent_id, skill_id, version, 'r', 'x/y', 'x', '{{}}', '{{}}'::jsonb,
                       now() - interval '50 days', {expires}, {decided}
                  FROM capability_versions WHERE tenant = $3 LIMIT 1""",
            approval_id,
            status,
            tenant,
        )
    return ids
