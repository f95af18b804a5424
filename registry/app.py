"""The HTTP application: lifespan (database, migrations, keys), middleware, routes, OpenAPI."""

from __future__ import annotations

import asyncio
import logging
import math
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from litestar import Litestar, Response, get
from litestar.openapi import OpenAPIConfig
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from db.embedded import resolve_database_url
from db.metrics_gauges import read_gauges
from db.migrate import apply_migrations
from db.pool import create_pool
from registry.a2a import routes as a2a_rpc
from registry.agents import publisher_routes as publisher
from registry.agents import routes as agents
from registry.ard import routes as ard
from registry.audit import chain as audit_chain
from registry.audit import routes as audit
from registry.config import Settings, load_settings
from registry.console import routes as console
from registry.core.bounded_work import bounded_work
from registry.core.change_watcher import ChangeWatcher
from registry.core.problems import handle_exception
from registry.core.publisher_domains import check_publisher_domains
from registry.core.signing_keys import ensure_signing_key, load_keyring
from registry.discovery import routes as discovery
from registry.mcp import routes as mcp
from registry.offers import routes as offers
from registry.ops import routes as ops
from registry.ops.housekeeping import run_housekeeping
from registry.release import routes as release
from registry.state import Registry
from registry.tickets import approval_routes as approvals
from registry.tickets import routes as tickets
from registry.versions import replay_routes as replays
from registry.versions import routes as versions
from registry.web import api_docs
from registry.web.observability import (
    AccessLog,
    DatabaseGauges,
    RequestMetrics,
    observability_middleware,
    unmatched_requests,
)
from registry.web.openapi_strict import StrictJsonRenderPlugin
from registry.web.query_parameters import DeclaredQueries
from registry.web.rate_limit import TokenBuckets, rate_limit_middleware
from registry.web.request_guard import screen_guard, screens, unstorable_screen
from registry.web.route_methods import answer_every_method

log = logging.getLogger("capreg")


def create_app(settings: Settings | None = None) -> Litestar:
    settings = settings or load_settings()
    check_publisher_domains(settings.publisher_domains)  # ARD publisher domains: refused at start-up, not per request

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        dsn, embedded = resolve_database_url(settings.database_url, settings.home)
        pool = await create_pool(dsn, min_size=settings.pool_min, max_size=settings.pool_max)
        read_pool: asyncpg.Pool | None = None
        try:
            # Reads' own connections (registry.core.read_admission): writes never wait for them.
            read_pool = await create_pool(
                dsn,
                min_size=1,
                max_size=settings.read_pool_max,
                statement_timeout=settings.read_statement_timeout,
            )
            async with pool.acquire() as conn:
                await apply_migrations(conn)
                await ensure_signing_key(conn)
            keyring = await load_keyring(pool)
            watcher = ChangeWatcher(dsn)
            await watcher.start(pool)
            registry = Registry(settings, pool, keyring, watcher, read_pool)
            app.state.registry = registry
            app.state.metrics = metrics  # the process's series (tests read the database gauges' reads)
            await registry.search.build()
            registry.search.start()
            registry.writes.start()
            registry.leases.start()
            # What registrant schema work's processes import when they start (on first use; they
            # stop after a minute without work: registry.core.bounded_work).
            bounded_work().start(preload=("registry.release.arguments", "registry.agents.preparation"))
            metrics.gauges = [
                ("capreg_db_pool_size", "connections open in the pool", pool.get_size),
                ("capreg_db_pool_idle", "idle connections in the pool", pool.get_idle_size),
                ("capreg_read_in_flight", "reads holding a read connection", lambda: registry.reads.in_flight),
                ("capreg_read_waiting", "reads waiting for a read connection", lambda: registry.reads.waiting),
                ("capreg_read_shed", "reads shed with 503 since start", lambda: registry.reads.shed),
            ]
            metrics.counters = [
                (
                    "capreg_response_cache_hits",
                    "discovery pages and cards answered from the cache",
                    lambda: registry.responses.hits,
                ),
                (
                    "capreg_response_cache_misses",
                    "discovery pages and cards not in the cache",
                    lambda: registry.responses.misses,
                ),
                (
                    "capreg_release_cache_hits",
                    "release rows answered from the cache",
                    lambda: registry.release_cache.hits,
                ),
                ("capreg_release_cache_misses", "release rows not in the cache", lambda: registry.release_cache.misses),
            ]
            metrics.gauges += [
                ("capreg_response_cache_bytes", "bytes held by the response cache", lambda: registry.responses.bytes),
                ("capreg_release_cache_bytes", "bytes held by the release cache", lambda: registry.release_cache.bytes),
            ]
            metrics.histograms = [
                (
                    "capreg_group_commit_batch_size",
                    "audited writes per group-commit batch",
                    registry.writes.batch_sizes,
                ),
                ("capreg_lease_batch_size", "heartbeats per lease-renewal batch", registry.leases.batch_sizes),
                (
                    "capreg_db_pool_wait_seconds",
                    "request paths' wait for a main-pool connection",
                    registry.pool_waits.waits,
                ),
                (
                    "capreg_read_pool_wait_seconds",
                    "admitted reads' wait for a read-pool connection",
                    registry.reads.pool_waits.waits,
                ),
            ]
            # Read when /metrics is scraped, at most every few seconds (registry.web.observability).
            metrics.database = DatabaseGauges(
                read=lambda: read_gauges(pool),
                index_seq=lambda: registry.search.seq,
                monotonic=lambda: registry.clock.monotonic(),
            )
            metrics.auth_failures = registry.auth_failures
            checkpoints = audit_chain.start_checkpoints(registry)
            chores = [asyncio.create_task(registry.watch_keys()), asyncio.create_task(run_housekeeping(registry))]
            if metrics.shared_dir:  # capreg serve --workers N: this worker's metrics, for every scrape
                chores.append(asyncio.create_task(metrics.share()))
            try:
                yield
            finally:
                for chore in chores:
                    chore.cancel()
                await asyncio.gather(*chores, return_exceptions=True)
                await audit_chain.stop_checkpoints(checkpoints)
                await registry.leases.stop()
                await registry.ticket_checks.stop()
                await registry.writes.stop()
                await registry.search.stop()
                await watcher.stop()
        finally:
            if read_pool is not None:
                await read_pool.close()
            await pool.close()
            del embedded  # the embedded server handle stops the server when its last user exits

    # Set by `capreg serve --workers N`: the workers' metrics meet there (registry.web.observability).
    metrics = RequestMetrics(shared_dir=os.environ.get("CAPREG_METRICS_DIR"))
    exposition = metrics.registry()

    @get("/metrics", include_in_schema=False)
    async def serve_metrics() -> Response:
        if metrics.database is not None:
            await metrics.database.refresh()
        return Response(generate_latest(exposition), media_type=CONTENT_TYPE_LATEST)

    # Query parameters no route declares are refused before the handler (registry.web.query_parameters),
    # after a value PostgreSQL cannot store (refused and audited); the names are learnt once the app is built.
    declared_queries = DeclaredQueries()
    screen = screens(unstorable_screen, declared_queries.screen)

    access_log = AccessLog(settings.access_log)
    app = Litestar(
        # each operation's OpenAPI tag and security (registry.web.api_docs)
        route_handlers=api_docs.documented(
            [
                *agents.ROUTES,
                *discovery.ROUTES,
                *release.ROUTES,
                *versions.ROUTES,
                *tickets.ROUTES,
                *approvals.ROUTES,
                *audit.ROUTES,
                *ops.ROUTES,
                *mcp.ROUTES,
                serve_metrics,
                *offers.ROUTES,
                *a2a_rpc.ROUTES,
                *replays.ROUTES,
                *ard.ROUTES,  # ARD: /.well-known/ard.json and /ard/*
                *console.ROUTES,  # the security console and the offline /schema assets
                *publisher.ROUTES,  # publisher keys, registrations as signed
            ]
        ),
        lifespan=[lifespan],
        middleware=[
            # trace and request ids, metrics, and the browser security headers (CSP, nosniff,
            # no referrer, no framing: registry/console/routes.py) in one layer; with no rate
            # limiter, the unstorable-value and unknown-query screens too (in the same pass)
            observability_middleware(
                metrics,
                extra_headers=console.browser_headers,
                screen=None if settings.rate_limit > 0 else screen,
                # one JSON line per request on `capreg.access` (CAPREG_ACCESS_LOG: a level, or off)
                access_log=access_log,
            ),
            *(
                [
                    # before the screens, so a caller cannot use refused requests to bypass its bucket
                    rate_limit_middleware(
                        TokenBuckets(
                            settings.rate_limit, settings.rate_burst or max(1, math.ceil(2 * settings.rate_limit))
                        ),
                        settings.trusted_proxies,
                    ),
                    screen_guard(screen),
                ]
                if settings.rate_limit > 0
                else []
            ),
        ],
        # requests no route matched skip the middleware: their answers are counted and logged as
        # `unmatched` by the handler that makes them
        exception_handlers={
            Exception: unmatched_requests(handle_exception, metrics, console.browser_headers, access_log)
        },
        request_max_body_size=settings.max_body,
        openapi_config=OpenAPIConfig(
            title="capreg",
            version="1.0.0",
            description="Capability registry and discovery service for AI agents.",
            path="/schema",
            components=api_docs.components(),  # bearer JWT: Swagger UI's Authorize button
            tags=api_docs.tags(),
            # no CDN: assets served by capreg; openapi.json is the committed document's bytes
            render_plugins=[console.OfflineSwaggerRenderPlugin(), StrictJsonRenderPlugin()],
        ),
        debug=False,
    )
    declared_queries.learn(app)  # each route's query parameters, as litestar reads them
    answer_every_method(app)  # OPTIONS on a path served by two handlers lists both (registry.web.route_methods)
    return app
