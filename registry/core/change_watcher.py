"""The change watcher: follows the committed change sequence (db/changes.py) over a dedicated LISTEN
connection, so per-process caches know when to drop what they hold (registry.core.response_cache) and
long-polls wake on changes; it also forwards key-rotation notifications (db/keys.py) to whoever
holds the keyring (registry.state.Registry.keys_changed)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import asyncpg

from db.changes import CHANGE_CHANNEL, LOCAL_CHANGE_LISTENERS, current_seq
from db.keys import KEYS_CHANNEL
from db.pool import connect

log = logging.getLogger("capreg")


class ChangeWatcher:
    """Follows the change sequence over a dedicated LISTEN connection (the pool UNLISTENs on release).

    Waiters wake on every committed change; if the connection drops, waiters fall back to polling
    and caches keyed by `seq` are refreshed from the database on reconnect.
    """

    def __init__(self, dsn: str):
        self.dsn = dsn
        self.seq = 0
        # True while LISTEN is connected and caught up: only then may caches trust `seq`.
        self.listening = False
        self._changed = asyncio.Event()
        self._conn: asyncpg.Connection | None = None
        self._task: asyncio.Task | None = None
        # Called when capreg's signing keys changed (a rotation in any process), and on reconnect.
        self.on_keys_changed: Callable[[], None] | None = None

    async def start(self, pool: asyncpg.Pool) -> None:
        self.seq = await current_seq(pool)
        LOCAL_CHANGE_LISTENERS.add(self._local_change)
        self._task = asyncio.create_task(self._run(pool))

    async def stop(self) -> None:
        LOCAL_CHANGE_LISTENERS.discard(self._local_change)
        self.listening = False
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()

    def _local_change(self, seq: int) -> None:
        # A write of this process, not yet committed: move on so no cache serves what it replaces.
        self.seq = max(self.seq, seq)

    def cache_seq(self) -> int | None:
        """The sequence number cached responses must carry, or None when caching must stay off."""
        return self.seq if self.listening else None

    def _notified(self, _conn, _pid, _channel, payload: str) -> None:
        with contextlib.suppress(ValueError):
            self.seq = max(self.seq, int(payload))
        self._changed.set()
        self._changed = asyncio.Event()

    def _keys_notified(self, *_args) -> None:
        if self.on_keys_changed is not None:
            self.on_keys_changed()

    async def _run(self, pool: asyncpg.Pool) -> None:
        while True:
            try:
                self._conn = await connect(self.dsn)
                await self._conn.add_listener(CHANGE_CHANNEL, self._notified)
                await self._conn.add_listener(KEYS_CHANNEL, self._keys_notified)
                self._keys_notified()  # a rotation may have happened while we were not listening
                # Notifications sent while we were disconnected are lost: catch up from the table.
                self.seq = max(self.seq, await current_seq(pool))
                self.listening = True
                self._changed.set()
                self._changed = asyncio.Event()
                while not self._conn.is_closed():
                    await asyncio.sleep(0.2)
                self.listening = False
            except asyncio.CancelledError:
                self.listening = False
                raise
            except Exception as exc:  # keep following; waiters poll meanwhile
                self.listening = False
                log.warning("change listener disconnected: %r", exc)
                await asyncio.sleep(1.0)

    async def wait(self, timeout: float) -> None:
        """Return after the next change or `timeout` seconds, whichever comes first."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):  # not wait_for: it may drop a cancellation (db.audit_sequencer)
                await self._changed.wait()
