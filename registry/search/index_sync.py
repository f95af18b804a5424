"""The search engine kept current in this process (registry.search.engine): built from PostgreSQL at
start-up, then following the change feed (db.changes) so that a version published, retired or hidden
in any process or replica is found, or gone, here too.

How it stays current: every change names its agent; the engine re-reads the whole agent (every
version, with its visibility) and replaces it. It catches up when the change watcher hears of a
change (within a poll of FOLLOW_INTERVAL when notifications are down), and before every query whose
process has written or heard of a change the engine has not seen, so a process reads its own writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence

import asyncpg
import msgspec

from db import search_index as index_queries
from db.pool import connect
from registry.core.change_watcher import ChangeWatcher
from registry.search.embeddings import Embedder
from registry.search.engine import Document, Hit, Proposal, SearchIndex

log = logging.getLogger("capreg")

# Changes read per catch-up statement (each names one agent; repeated agents are read once).
CHANGES_PER_READ = 500
# Changes a request applies before it is answered (its own writes are among the first; a backlog,
# such as a bulk load's, is the follower's to apply, so no request waits for it).
REQUEST_CHANGES_MAX = 200
# How often the follower looks at the change sequence when no notification arrives.
FOLLOW_INTERVAL = 0.25


def document(row: index_queries.DocumentRow) -> Document:
    """A db.search_index row as the engine's document."""
    examples = tuple(e for e in (row.examples or ()) if isinstance(e, str))
    return Document(
        tenant=row.tenant,
        agent_id=row.agent_id,
        skill_id=row.skill_id,
        version=row.version,
        name=row.name,
        description=row.description,
        tags=tuple(row.tags),
        examples=examples,
        agent_name=row.agent_name,
        agent_description=row.agent_description,
        public=row.visibility == "public",
        shared_with=tuple(row.shared_with),
        latest=row.latest,
        status=row.status,
        side_effect_rank=row.side_effect_rank,
        regions=tuple(row.data_regions),
    )


class BuildReport(msgspec.Struct, frozen=True):
    """How the start-up build went (logged; docs/performance.md#ranked-search)."""

    versions: int
    seconds: float
    seq: int


class SearchService:
    """This process's engine and where it stands in the change feed."""

    def __init__(self, pool: asyncpg.Pool, watcher: ChangeWatcher, *, meaning: bool) -> None:
        self.pool = pool
        self.watcher = watcher
        self.index = SearchIndex(Embedder() if meaning else None)
        self.seq = 0
        self._catching_up = asyncio.Lock()
        self._task: asyncio.Task | None = None

    async def build(self) -> BuildReport:
        """Index every version as of one snapshot; later changes are caught up from its sequence."""
        started = time.monotonic()
        batches: list[list[Document]] = []
        async with self.pool.acquire() as conn:
            seq = await index_queries.snapshot(conn, lambda rows: batches.append([document(r) for r in rows]))
        for batch in batches:
            await asyncio.to_thread(self.index.replace, (), batch)
        self.seq = seq
        report = BuildReport(versions=self.index.size, seconds=round(time.monotonic() - started, 3), seq=seq)
        log.info("search index built: %d versions in %.1f s", report.versions, report.seconds)
        return report

    def start(self) -> None:
        self._task = asyncio.create_task(self._follow())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _follow(self) -> None:
        """Catch up after every change the watcher hears of, or every FOLLOW_INTERVAL, on a
        connection of its own: requests hold pool connections while they wait for a catch-up in
        progress, so the catch-up must never wait for one of theirs."""
        conn: asyncpg.Connection | None = None
        try:
            while True:
                await self.watcher.wait(FOLLOW_INTERVAL)
                try:
                    if conn is None or conn.is_closed():
                        conn = await connect(self.watcher.dsn)
                    await self.catch_up(conn)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # keep following; the next change or poll retries
                    log.warning("search index catch-up failed: %r", exc)
                    if conn is not None:
                        with contextlib.suppress(Exception):
                            await conn.close()
                    conn = None
                    await asyncio.sleep(FOLLOW_INTERVAL)
        finally:
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()

    async def catch_up(self, conn: asyncpg.Connection | asyncpg.Pool, *, most: int | None = None) -> None:
        """Apply the committed changes after the engine's sequence (whole agents re-read), reading
        through `conn`: the caller's own connection, never a second one from the pool. With `most`,
        one read of at most that many changes (a request's catch-up: the follower does the rest).
        The lock is held one read at a time, so a request never waits behind a whole backlog."""
        while self.seq < self.watcher.seq or not self.watcher.listening:
            limit = CHANGES_PER_READ if most is None else most
            async with self._catching_up:
                changes = await index_queries.changed_agents(conn, self.seq, limit=limit)
                if changes:
                    agents = list(
                        dict.fromkeys(
                            (c.tenant, c.agent_id) for c in changes if c.kind not in index_queries.NOT_INDEXED_KINDS
                        )
                    )
                    if agents:
                        # Read after the changes, so each agent's rows are at least as new as its changes.
                        rows = await index_queries.agent_documents(conn, agents)
                        await asyncio.to_thread(self.index.replace, agents, [document(r) for r in rows])
                    self.seq = changes[-1].seq
            if most is not None or len(changes) < limit:
                return

    async def propose(
        self, conn: asyncpg.Connection | asyncpg.Pool, words: Sequence[str], where: Proposal
    ) -> list[Hit]:
        """The engine's candidates, after catching up (through `conn`) with any change this process
        knows of and the engine has not applied (read your writes)."""
        if self.seq < self.watcher.seq:
            await self.catch_up(conn, most=REQUEST_CHANGES_MAX)
        return await asyncio.to_thread(self.index.propose, words, where)
