"""Migration runner: numbered SQL files under db/migrations, applied once each, under an advisory lock."""

from __future__ import annotations

import hashlib
from importlib import resources

import asyncpg

# Any constant works; it only has to be the same for every capreg process.
_MIGRATION_LOCK = 0x6361_7072_6567  # "capreg"


async def _backfill_latest(conn: asyncpg.Connection) -> None:
    from datetime import UTC, datetime

    from db.capabilities import refresh_all_latest

    await refresh_all_latest(conn, now=datetime.now(UTC))


# Steps run in a migration's transaction right after its SQL: data derived by rules that live in
# Python-built SQL (one definition), not written again in a migration file. 16 changed what the
# latest marker marks (one row per skill, nothing ahead of its effectiveAt): every marker again.
_AFTER = {12: _backfill_latest, 16: _backfill_latest}


class MigrationError(RuntimeError):
    pass


def migration_files() -> list[tuple[int, str, str]]:
    """(version, name, sql) for every migration shipped with the package, in order."""
    found = []
    for entry in resources.files("db").joinpath("migrations").iterdir():
        if entry.name.endswith(".sql"):
            number, _, rest = entry.name.partition("_")
            found.append((int(number), entry.name, entry.read_text(encoding="utf-8")))
    return sorted(found)


def _digest(sql: str) -> str:
    return hashlib.sha256(sql.encode()).hexdigest()


async def apply_migrations(conn: asyncpg.Connection, *, upto: int | None = None) -> list[str]:
    """Apply pending migrations (those numbered up to `upto`, default all); returns the names applied.
    Refuses if an applied file changed."""
    await conn.execute("SELECT pg_advisory_lock($1)", _MIGRATION_LOCK)
    try:
        # Checked first: the application's database role may lack CREATE (README, "Production database roles").
        if not await conn.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL"):
            await conn.execute(
                """CREATE TABLE IF NOT EXISTS schema_migrations (
                       version integer PRIMARY KEY, name text NOT NULL, sha256 text NOT NULL,
                       applied_at timestamptz NOT NULL DEFAULT now())"""
            )
        applied = {
            row["version"]: row for row in await conn.fetch("SELECT version, name, sha256 FROM schema_migrations")
        }
        done = []
        for version, name, sql in migration_files():
            if upto is not None and version > upto:
                break
            if version in applied:
                if applied[version]["sha256"] != _digest(sql):
                    raise MigrationError(f"migration {name} changed after it was applied")
                continue
            async with conn.transaction():
                await conn.execute(sql)
                if version in _AFTER:
                    await _AFTER[version](conn)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name, sha256) VALUES ($1, $2, $3)",
                    version,
                    name,
                    _digest(sql),
                )
            done.append(name)
        return done
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", _MIGRATION_LOCK)


async def pending_migrations(conn: asyncpg.Connection) -> list[str]:
    """Names of shipped migrations not yet applied (for /readyz)."""
    exists = await conn.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL")
    applied = set()
    if exists:
        applied = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}
    return [name for version, name, _ in migration_files() if version not in applied]
