"""Support for the audit tests: throw-away databases (tampering needs a log nobody else shares) and
the `capreg` CLI run as a separate process, as an operator runs it."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg

ROOT = Path(__file__).parent.parent


def database_url_on(server_url: str, database: str) -> str:
    """`server_url` pointing at another database (TCP URLs and the embedded server's socket URLs)."""
    base, sep, query = server_url.partition("?")
    return base.rsplit("/", 1)[0] + f"/{database}" + sep + query


@asynccontextmanager
async def fresh_database(server_url: str, *, migrated: bool = True):
    """A new, empty database on the test server (migrated, with a signing key), dropped afterwards."""
    from auth.keys import ensure_signing_key
    from db.migrate import apply_migrations
    from db.pool import connect

    name = "capreg_audit_" + secrets.token_hex(4)
    admin = await asyncpg.connect(server_url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    url = database_url_on(server_url, name)
    try:
        if migrated:
            conn = await connect(url)
            try:
                await apply_migrations(conn)
                await ensure_signing_key(conn)
            finally:
                await conn.close()
        yield url
    finally:
        admin = await asyncpg.connect(server_url)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def capreg_cli(database_url: str, *args: str, home: Path | None = None) -> subprocess.CompletedProcess:
    """`python -m registry.cli ARGS` with DATABASE_URL set; returns the finished process (any exit code)."""
    env = {**os.environ, "DATABASE_URL": database_url}
    if home is not None:
        env["CAPREG_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "registry.cli", *args], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT
    )
