"""Migrations: applied once, concurrently safe, refusing edited files."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from db.migrate import MigrationError, apply_migrations, migration_files, pending_migrations
from tests.conftest import scratch_database


@pytest.fixture
async def empty_database(server_url):
    async with scratch_database(server_url, "migrate") as url:
        yield url


async def test_concurrent_migrations_apply_each_file_once(empty_database):
    conns = [await asyncpg.connect(empty_database) for _ in range(4)]
    try:
        results = await asyncio.gather(*[apply_migrations(c) for c in conns])
        applied = [name for result in results for name in result]
        assert sorted(applied) == sorted(name for _, name, _ in migration_files())
        assert await pending_migrations(conns[0]) == []
        await conns[0].execute("UPDATE schema_migrations SET sha256 = 'tampered' WHERE version = 1")
        with pytest.raises(MigrationError, match="changed after it was applied"):
            await apply_migrations(conns[0])
    finally:
        for conn in conns:
            await conn.close()
