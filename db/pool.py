"""Connection pool: JSONB codec, the one place that opens connections to PostgreSQL, and the timed
acquisition of a pooled connection on request paths (the wait is a /metrics histogram)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator

import asyncpg
import msgspec

from db.histograms import WAIT_BUCKETS, Histogram

# JIT off: capreg's statements are short, and a plan whose estimated cost passes jit_above_cost
# (a broad search at 100,000 versions) spent 1.4-1.5 s compiling with LLVM to run for 0.7 s
# (docs/performance.md#ranked-search). Set per connection, so the server's default stays as it is.
SERVER_SETTINGS = {"jit": "off"}
# Seconds any statement may run before asyncpg gives up on it (reads have a lower server-side bound:
# create_pool's statement_timeout, CAPREG_READ_STATEMENT_TIMEOUT).
COMMAND_TIMEOUT = 30.0

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


async def _init_connection(conn: asyncpg.Connection) -> None:
    # Binary JSONB codec: the text codec breaks copy_records_to_table.
    await conn.set_type_codec(
        "jsonb",
        schema="pg_catalog",
        encoder=lambda value: b"\x01" + _encoder.encode(value),
        decoder=lambda data: _decoder.decode(data[1:]),
        format="binary",
    )


async def _reset_connection(conn: asyncpg.Connection) -> None:
    """Run when a connection goes back to the pool, instead of asyncpg's reset query.

    That query (UNLISTEN *, RESET ALL, advisory unlock all, CLOSE ALL, ...) is one more round trip
    on every release, and capreg's pooled sessions carry none of that state: no SET, only
    transaction-scoped advisory locks (the migration lock is released explicitly), LISTEN only on
    dedicated connections. An open transaction (a cancelled request) is still rolled back.
    """
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


async def create_pool(
    dsn: str, *, min_size: int = 2, max_size: int = 10, statement_timeout: float | None = None
) -> asyncpg.Pool:
    """`statement_timeout` (seconds): the server cancels a statement of these connections past it
    (the read pool's: registry.core.read_admission), set once per connection, no round trip per query."""
    settings = dict(SERVER_SETTINGS)
    if statement_timeout is not None:
        settings["statement_timeout"] = str(max(1, int(statement_timeout * 1000)))
    return await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        init=_init_connection,
        reset=_reset_connection,
        command_timeout=COMMAND_TIMEOUT,
        server_settings=settings,
    )


async def connect(dsn: str) -> asyncpg.Connection:
    conn = await asyncpg.connect(dsn, server_settings=SERVER_SETTINGS)
    await _init_connection(conn)
    return conn


class PoolWaits:
    """How long request paths waited for a connection of one pool (`acquire`): asyncpg's pool keeps
    no such figure public, so capreg times its own acquisitions."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.waits = Histogram(WAIT_BUCKETS)

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[asyncpg.Connection]:
        started = time.perf_counter()
        async with self.pool.acquire() as conn:
            self.waits.observe(time.perf_counter() - started)
            yield conn
