"""`capreg keys rotate`: a new key signs; the previous one stays in the JWKS until the last ticket it
signed has expired (and --keep-seconds has passed), so tickets signed before a rotation keep
verifying, online and offline, until they expire."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

import msgspec

from auth.tickets import TicketClaims, sign_ticket
from registry.core.signing_keys import load_keyring
from tests.ticket_support import offline_checker, register_finance, ticket_body, unverified

ROOT = Path(__file__).parents[2]


async def capreg(database_url: str, *args: str) -> tuple[int, str]:
    """Run the `capreg` CLI as an operator would, on the test database."""
    env = {**os.environ, "DATABASE_URL": database_url, "CAPREG_HOME": tempfile.mkdtemp(prefix="capreg-cli-")}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "registry.cli",
        *args,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await process.communicate()
    return process.returncode, output.decode()


def jwks_kids(response) -> set[str]:
    assert response.status_code == 200
    return {key["kid"] for key in response.json()["keys"]}


def seconds_pass(registry) -> None:
    """Let the app's key cache age past its refresh interval (it reloads at most every 5 s)."""
    registry.keyring.loaded_at -= 10


async def test_rotation_keeps_old_tickets_valid_until_they_expire(client, mint, registry, db, database_url, tenant):
    await register_finance(client, mint, tenant)
    check_ticket = offline_checker()
    old_kid = registry.keyring.signing_kid
    before = await client.post(
        "/v1/tickets",
        headers=mint(tenant, "router", "invoice:read"),
        json=ticket_body(tenant, resources=["invoice:inv-1"], ttlSeconds=600, maxDepth=1),
    )
    assert before.status_code == 201, before.text
    old_ticket = before.json()["ticket"]
    assert unverified(old_ticket)[0]["kid"] == old_kid

    code, output = await capreg(database_url, "keys", "rotate", "--keep-seconds", "1")
    assert code == 0, output
    assert "new signing key" in output
    key = await db.fetchrow("SELECT retired_at, publish_until FROM signing_keys WHERE kid = $1", old_kid)
    assert key["retired_at"] is not None
    last_expiry = await db.fetchval("SELECT max(expires_at) FROM tickets WHERE kid = $1", old_kid)
    assert key["publish_until"] >= last_expiry

    seconds_pass(registry)
    after = await client.post("/v1/tickets", headers=mint(tenant, "router", "invoice:read"), json=ticket_body(tenant))
    assert after.status_code == 201, after.text
    new_kid = unverified(after.json()["ticket"])[0]["kid"]
    assert new_kid != old_kid and new_kid == registry.keyring.signing_kid

    # Both keys are published; the old ticket verifies online and offline, and still delegates.
    jwks = await client.get("/.well-known/jwks.json")
    assert jwks_kids(jwks) >= {old_kid, new_kid}
    assert check_ticket(old_ticket, jwks.json(), f"{tenant}/billing-agent")["jti"] == before.json()["jti"]
    agent = mint(tenant, "billing-agent")
    introspected = await client.post("/v1/tickets/introspect", json={"ticket": old_ticket}, headers=agent)
    assert introspected.json()["active"] is True
    child = await client.post(
        "/v1/tickets",
        headers=agent,
        json=ticket_body(
            tenant,
            "ledger-agent",
            "ledger.read",
            resources=["invoice:inv-1"],
            ttlSeconds=60,
            parentTicket=old_ticket,
        ),
    )
    assert child.status_code == 201, child.text
    assert unverified(child.json()["ticket"])[0]["kid"] == new_kid

    # Past --keep-seconds but with a ticket it signed still live, the old key stays.
    await db.execute("UPDATE signing_keys SET publish_until = now() - interval '1 second' WHERE kid = $1", old_kid)
    seconds_pass(registry)
    assert old_kid in jwks_kids(await client.get("/.well-known/jwks.json"))

    # Once the last ticket it signed has expired, it leaves; its tickets no longer verify anywhere.
    await db.execute(
        "UPDATE tickets SET expires_at = least(expires_at, now() - interval '1 second') WHERE kid = $1", old_kid
    )
    seconds_pass(registry)
    jwks = await client.get("/.well-known/jwks.json")
    assert old_kid not in jwks_kids(jwks) and new_kid in jwks_kids(jwks)
    agent = mint(tenant, "billing-agent")
    gone = await client.post("/v1/tickets/introspect", json={"ticket": old_ticket}, headers=agent)
    assert gone.json() == {"active": False}


async def test_a_ticket_signed_by_a_key_this_process_has_not_loaded_yet_verifies(
    client, mint, registry, db, database_url, tenant
):
    """Another replica rotated and signed a ticket: an unknown kid makes this process reload its keys."""
    await register_finance(client, mint, tenant)
    ticket = await client.post("/v1/tickets", headers=mint(tenant, "router", "invoice:read"), json=ticket_body(tenant))
    claims = msgspec.convert(unverified(ticket.json()["ticket"])[1], TicketClaims)
    # As if the rotation's notification had not arrived yet (registry.core.change_watcher.ChangeWatcher).
    registry.watcher.on_keys_changed = None
    try:
        code, output = await capreg(database_url, "keys", "rotate")
    finally:
        registry.watcher.on_keys_changed = registry.keys_changed
    assert code == 0, output
    other_replica = await load_keyring(db)
    assert other_replica.signing_kid not in registry.keyring.public
    # The same claims (and stored row), signed by the other replica with the new key.
    resigned = sign_ticket(other_replica, claims)
    seconds_pass(registry)
    answer = await client.post(
        "/v1/tickets/introspect", json={"ticket": resigned}, headers=mint(tenant, "billing-agent")
    )
    assert answer.json()["active"] is True
    assert other_replica.signing_kid in registry.keyring.public
