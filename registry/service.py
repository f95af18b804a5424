"""The running registry: settings, pool, keys and caller authentication shared by every handler."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from collections import Counter
from collections.abc import Callable

import asyncpg
import jwt
from litestar import Request

from auth.issuers import IssuerKeyRefresher, load_external_issuers
from auth.keys import Keyring, load_keyring
from auth.policy import check_scope
from auth.principal import Caller
from auth.tokens import InvalidToken, TokenVerifier
from db.changes import CHANGE_CHANNEL, LOCAL_CHANGE_LISTENERS, current_seq
from db.group_commit import GroupCommit
from db.keys import KEYS_CHANNEL
from db.leases import LeaseRenewals
from db.pool import connect
from registry.config import Settings
from registry.problems import ProblemError, invalid_token, refused
from registry.response_cache import ResponseCache

log = logging.getLogger("capreg")

# An unknown kid reloads the keyring at most this often (a rotation elsewhere is also NOTIFYed).
_KEYRING_REFRESH_SECONDS = 5.0
# A safety net under the NOTIFY: the keyring is reloaded at least this often.
_KEYRING_POLL_SECONDS = 30.0
# The scheme of an Authorization header (any case), then whitespace, then the token.
_BEARER = "bearer"


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
        self.issuer_keys = IssuerKeyRefresher(settings.trusted_issuers, self.verifier.external)
        # Requests refused for want of a valid caller token, by reason (/metrics); never audited.
        self.auth_failures: Counter[str] = Counter()
        self._keyring_lock = asyncio.Lock()
        self._keyring_reload: asyncio.Task | None = None
        watcher.on_keys_changed = self.keys_changed
        # Audited writes of concurrent requests share one transaction and commit (db.group_commit).
        self.writes = GroupCommit(pool)
        # Heartbeats of concurrent requests renewed in one statement and commit (db.leases).
        self.leases = LeaseRenewals(pool)
        # Discovery pages and public cards, valid for one change sequence number (registry.response_cache).
        self.responses = ResponseCache()
        # Rows behind detail releases, on the same terms (registry.skill_records.skill_record).
        self.release_cache = ResponseCache()
    @property
    def verified(self):
        """The one cache of verified caller tokens and tickets (auth.tokens.VerifiedTokens)."""
        return self.verifier.cache

    async def refresh_keyring(self, *, force: bool = False) -> None:
        """Reload keys (another replica may have rotated); at most every few seconds unless forced."""
        async with self._keyring_lock:
            if not force and time.monotonic() - self.keyring.loaded_at < _KEYRING_REFRESH_SECONDS:
                return
            self.keyring = await load_keyring(self.pool)
            self.verifier.keyring = self.keyring

    def keys_changed(self) -> None:
        """A rotation was committed somewhere: reload now, so a removed key stops verifying at once
        (cached verifications re-check their kid against the keyring)."""
        if self._keyring_reload is None or self._keyring_reload.done():
            self._keyring_reload = asyncio.create_task(self._reload_keyring())

    async def _reload_keyring(self) -> None:
        try:
            await self.refresh_keyring(force=True)
        except Exception as exc:  # the poll below tries again
            log.warning("keyring reload failed: %r", exc)

    async def watch_keys(self) -> None:
        """Background: the keyring and external issuers' key sets, kept current."""
        refresher = asyncio.create_task(self.issuer_keys.run())
        try:
            while True:
                await asyncio.sleep(_KEYRING_POLL_SECONDS)
                await self._reload_keyring()
        finally:
            refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await refresher

    async def verify(self, token: str) -> Caller:
        """The caller a bearer token names; InvalidToken otherwise."""
        try:
            return self.verifier.verify(token)
        except InvalidToken as exc:
            if exc.reason != "unknown_key":
                raise
        # A key this process has not seen: capreg's own (another replica rotated) or a partner's.
        try:
            iss = jwt.decode(token, options={"verify_signature": False}).get("iss")
        except jwt.PyJWTError:
            iss = None
        if iss == self.settings.issuer:
            await self.refresh_keyring()
        elif isinstance(iss, str):
            await self.issuer_keys.unknown_kid(iss)
        return self.verifier.verify(token)

    async def authenticate(self, header: str | None, state: dict) -> Caller | None:
        """The verified caller of a request, once per request (the result is kept in `state`, so the
        rate limiter and the handler verify once). None without an Authorization header; a bad
        token is 401 `invalid_token`, never anonymous, and is counted, not audited."""
        if "caller" in state:
            known = state["caller"]
            if isinstance(known, ProblemError):
                raise known
            return known
        if header is None:
            state["caller"] = None
            return None
        try:
            parts = header.split()
            if len(parts) != 2 or parts[0].lower() != _BEARER:
                raise InvalidToken("Authorization must be 'Bearer <token>'", "malformed")
            caller = await self.verify(parts[1])
        except InvalidToken as exc:
            self.auth_failures[exc.reason] += 1
            state["caller"] = error = invalid_token(str(exc))
            raise error from None
        state["caller"] = caller
        return caller

    async def caller(self, request: Request) -> Caller | None:
        """The verified caller, or None when no token is presented. A bad token is 401, never anonymous."""
        return await self.authenticate(request.headers.get("authorization"), request.scope.setdefault("state", {}))

    async def require_caller(self, request: Request, scope: str | None = None) -> Caller:
        caller = await self.caller(request)
        if caller is None:
            self.auth_failures["missing"] += 1
            raise invalid_token("this endpoint needs a bearer token")
        refusal = check_scope(caller, scope)
        if refusal is not None:
            raise refused(refusal)
        return caller

    def public_url(self, request: Request) -> str:
        if self.settings.public_url:
            return self.settings.public_url
        return str(request.base_url).rstrip("/")


def registry_of(request: Request) -> Registry:
    return request.app.state.registry


def trace_id_of(request: Request) -> str | None:
    return request.scope.get("state", {}).get("trace_id")
