"""The app state: what every request shares, created once per process by the app's lifespan
(registry.app) — settings, the pool, the keyring (kept current across replicas), the token verifier,
the group commit for audited writes, batched lease renewals, the per-process caches and the change
watcher (registry.core.change_watcher). Authenticating a request's caller is registry.web.authentication.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter

import asyncpg
from litestar import Request

from auth.issuers import IssuerKeyRefresher, load_external_issuers
from auth.keys import Keyring
from auth.tokens import TokenVerifier
from db.group_commit import GroupCommit
from db.leases import LeaseRenewals
from db.pool import PoolWaits
from db.tickets import ActiveTicketChecks
from registry.agents.card_signing import CardSignatures
from registry.ard.names import Publishers
from registry.audit.chain_checks import ChainChecks
from registry.audit.merkle import HeadTree
from registry.config import Settings, registry_url
from registry.core.cache_budget import share
from registry.core.change_watcher import ChangeWatcher
from registry.core.clock import Clock
from registry.core.read_admission import ReadAdmission
from registry.core.response_cache import ResponseCache
from registry.core.schema_guard import set_schema_cache_budget
from registry.core.signing_keys import load_keyring
from registry.search.index_sync import SearchService

log = logging.getLogger("capreg")

# An unknown kid reloads the keyring at most this often (a rotation elsewhere is also NOTIFYed).
_KEYRING_REFRESH_SECONDS = 5.0
# A safety net under the NOTIFY: the keyring is reloaded at least this often.
_KEYRING_POLL_SECONDS = 30.0


class Registry:
    """Everything a request handler shares with the others, created once per process by the app's lifespan."""

    def __init__(
        self,
        settings: Settings,
        pool: asyncpg.Pool,
        keyring: Keyring,
        watcher: ChangeWatcher,
        read_pool: asyncpg.Pool | None = None,
    ):
        self.settings = settings
        # The one clock of every time rule (registry.core.clock); tests step a SteppedClock.
        self.clock: Clock = Clock()
        self.pool = pool
        # Anonymous and ranked reads: their own connections, admitted or shed (registry.core.read_admission).
        self.reads = ReadAdmission(
            read_pool or pool,
            slots=settings.read_pool_max,
            queue=settings.read_queue,
            wait=settings.read_queue_wait,
        )
        self.keyring = keyring
        self.watcher = watcher
        # Ranked search's engine, kept current from the change feed (registry.search.index_sync).
        self.search = SearchService(pool, watcher, meaning=settings.search_meaning)
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
        # Request paths' waits for a main-pool connection (/metrics): acquire through it, not the pool.
        self.pool_waits = PoolWaits(pool)
        # Audited writes of concurrent requests share one transaction and commit (db.group_commit).
        self.writes = GroupCommit(pool, waits=self.pool_waits)
        # Heartbeats of concurrent requests renewed in one statement and commit (db.leases).
        self.leases = LeaseRenewals(pool, max_instances=settings.max_instances, waits=self.pool_waits)
        # Introspection's active checks of concurrent requests in one statement (db.tickets).
        self.ticket_checks = ActiveTicketChecks(pool, now=lambda: self.clock.now())
        # Discovery pages and public cards, valid for one change sequence number (registry.core.response_cache).
        budget = settings.cache_budget  # CAPREG_CACHE_BUDGET, shared out by registry.core.cache_budget
        self.responses = ResponseCache(max_bytes=share(budget, "responses"))
        # ARD publisher domains of tenants, both ways (registry.ard.names).
        self.publishers = Publishers(configured=dict(settings.publisher_domains))
        # Rows behind detail releases, on the same terms (registry.release.skill_records.skill_record).
        self.release_cache = ResponseCache(max_bytes=share(budget, "release"))
        self.verifier.cache.max_bytes = share(budget, "tokens")
        set_schema_cache_budget(share(budget, "schemas"))
        # The registry's signatures of the cards it served, once per card version (registry.agents.card_signing).
        self.card_signatures = CardSignatures()
        # GET /v1/audit/chain: running checks per chain, last answers, callers' last fresh check
        # (registry.audit.chain_checks).
        self.chain_checks = ChainChecks()
        # The latest checkpoint's Merkle tree for GET /v1/audit/proof (registry.audit.proof), replaced
        # by an updated copy when a new checkpoint is signed; and the checkpoint writer's own tree,
        # updated in place under the checkpoint lock (registry.audit.chain.make_checkpoint).
        self.audit_tree: HeadTree | None = None
        self.audit_tree_lock = asyncio.Lock()
        self.checkpoint_tree = HeadTree()

    @property
    def verified(self):
        """The one cache of verified caller tokens and tickets (auth.tokens.VerifiedTokens)."""
        return self.verifier.cache

    async def refresh_keyring(self, *, force: bool = False) -> None:
        """Reload keys (another replica may have rotated); at most every few seconds unless forced."""
        async with self._keyring_lock:
            # Keyring stamps loaded_at on the system's monotonic clock (auth.keys): a reload throttle, not a rule.
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

    def public_url(self) -> str:
        """The registry's own URL (registry.config.registry_url): never from the request."""
        return registry_url(self.settings)


def registry_of(request: Request) -> Registry:
    return request.app.state.registry


def trace_id_of(request: Request) -> str | None:
    return request.scope.get("state", {}).get("trace_id")
