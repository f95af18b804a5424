"""The running registry: settings, pool, keys and caller authentication shared by every handler."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import asyncpg
from litestar import Request

from auth.issuers import load_external_issuers
from auth.keys import Keyring, load_keyring
from auth.principal import Caller
from auth.tokens import InvalidToken, TokenVerifier
from db.changes import CHANGE_CHANNEL, LOCAL_CHANGE_LISTENERS, current_seq
from db.group_commit import GroupCommit
from db.leases import LeaseRenewals
from db.pool import connect
from registry.config import Settings
from registry.problems import insufficient_scope, invalid_token
from registry.response_cache import ResponseCache

log = logging.getLogger("capreg")

_KEYRING_REFRESH_SECONDS = 5.0


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

    async def _run(self, pool: asyncpg.Pool) -> None:
        while True:
            try:
                self._conn = await connect(self.dsn)
                await self._conn.add_listener(CHANGE_CHANNEL, self._notified)
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
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)


class Registry:
    """Everything a request handler needs, created once per process by the app's lifespan."""

    def __init__(self, settings: Settings, pool: asyncpg.Pool, keyring: Keyring, watcher: ChangeWatcher):
        self.settings = settings
        self.pool = pool
        self.keyring = keyring
        self.watcher = watcher
        self.verifier = TokenVerifier(
            keyring=keyring,
            issuer=settings.issuer,
            audience=settings.audience,
            external=load_external_issuers(settings.trusted_issuers),
        )
        self._keyring_lock = asyncio.Lock()
        # Audited writes of concurrent requests share one transaction and commit (db.group_commit).
        self.writes = GroupCommit(pool)
        # Heartbeats of concurrent requests renewed in one statement and commit (db.leases).
        self.leases = LeaseRenewals(pool)
        # Discovery pages and public cards, valid for one change sequence number (registry.response_cache).
        self.responses = ResponseCache()
        # Rows behind detail releases, on the same terms (registry.routes.details.skill_record).
        self.release_cache = ResponseCache()
        # Verified ticket claims by token string, until they expire (registry.delegation.verified_ticket).
        self.verified_tickets: dict = {}

    async def refresh_keyring(self) -> None:
        """Reload keys (another replica may have rotated); at most every few seconds."""
        async with self._keyring_lock:
            if time.monotonic() - self.keyring.loaded_at < _KEYRING_REFRESH_SECONDS:
                return
            self.keyring = await load_keyring(self.pool)
            self.verifier.keyring = self.keyring

    async def verify(self, token: str) -> Caller:
        try:
            return self.verifier.verify(token)
        except InvalidToken as exc:
            if str(exc) != "unknown kid":
                raise invalid_token(str(exc)) from None
        await self.refresh_keyring()
        try:
            return self.verifier.verify(token)
        except InvalidToken as exc:
            raise invalid_token(str(exc)) from None

    async def caller(self, request: Request) -> Caller | None:
        """The verified caller, or None when no token is presented. A bad token is 401, never anonymous."""
        header = request.headers.get("authorization")
        if header is None:
            return None
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise invalid_token("Authorization must be 'Bearer <token>'")
        return await self.verify(token.strip())

    async def require_caller(self, request: Request, scope: str | None = None) -> Caller:
        caller = await self.caller(request)
        if caller is None:
            raise invalid_token("this endpoint needs a bearer token")
        if scope is not None and not caller.holds(scope):
            raise insufficient_scope(scope)
        return caller

    def public_url(self, request: Request) -> str:
        if self.settings.public_url:
            return self.settings.public_url
        return str(request.base_url).rstrip("/")


def registry_of(request: Request) -> Registry:
    return request.app.state.registry


def trace_id_of(request: Request) -> str | None:
    return request.scope.get("state", {}).get("trace_id")
