"""The HTTP application: lifespan (database, migrations, keys), middleware, routes, OpenAPI."""

from __future__ import annotations

import asyncio
import logging
import math
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from litestar import Litestar
from litestar.openapi import OpenAPIConfig
from litestar import Response, get
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from auth.keys import ensure_signing_key, load_keyring
from db.embedded import resolve_database_url
from db.migrate import apply_migrations
from db.pool import create_pool
from registry.ard_names import check_publisher_domains
from registry.config import Settings, load_settings
from registry.problems import handle_exception
from registry.routes import a2a_rpc, agents, approvals, audit, console, discovery, mcp, ops, release, tickets, versions
from registry.routes import offers
from registry.routes import ard
from registry.routes import publisher
from registry.routes import replays
from registry import api_docs, audit_chain
from registry.change_watcher import ChangeWatcher
from registry.state import Registry
from registry.observability import RequestMetrics, observability_middleware
from registry.bounded_work import bounded_work
from registry.housekeeping import run_housekeeping
from registry.rate_limit import TokenBuckets, rate_limit_middleware
from registry.request_guard import unstorable_guard
from registry.route_methods import answer_every_method

log = logging.getLogger("capreg")

def create_app(settings: Settings | None = None) -> Litestar:
    settings = settings or load_settings()
    check_publisher_domains(settings.publisher_domains)  # ARD publisher domains: refused at start-up, not per request

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        dsn, embedded = resolve_database_url(settings.database_url, settings.home)
        pool = await create_pool(dsn, min_size=settings.pool_min, max_size=settings.pool_max)
        try:
            async with pool.acquire() as conn:
                await apply_migrations(conn)
                await ensure_signing_key(conn)
            keyring = await load_keyring(pool)
            watcher = ChangeWatcher(dsn)
            await watcher.start(pool)
            registry = Registry(settings, pool, keyring, watcher)
            app.state.registry = registry
            registry.writes.start()
            registry.leases.start()
            bounded_work().start()  # registrant schema work's processes, warmed before the first request
            metrics.gauges = [
                ("capreg_db_pool_size", "connections open in the pool", pool.get_size),
                ("capreg_db_pool_idle", "idle connections in the pool", pool.get_idle_size),
            ]
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
                await registry.writes.stop()
                await watcher.stop()
        finally:
            await pool.close()
            del embedded  # the embedded server handle stops the server when its last user exits

    # Set by `capreg serve --workers N`: the workers' metrics meet there (registry.observability).
    metrics = RequestMetrics(shared_dir=os.environ.get("CAPREG_METRICS_DIR"))
    exposition = metrics.registry()

    @get("/metrics", include_in_schema=False)
    async def serve_metrics() -> Response:
        return Response(generate_latest(exposition), media_type=CONTENT_TYPE_LATEST)

    app = Litestar(
        # each operation's OpenAPI tag and security (registry.api_docs)
        route_handlers=api_docs.documented([
            *agents.ROUTES, *discovery.ROUTES, *release.ROUTES, *versions.ROUTES, *tickets.ROUTES, *approvals.ROUTES,
            *audit.ROUTES, *ops.ROUTES, *mcp.ROUTES, serve_metrics, *offers.ROUTES, *a2a_rpc.ROUTES, *replays.ROUTES,
            *ard.ROUTES,  # ARD: /.well-known/ard.json and /ard/*
            *console.ROUTES,  # the security console and the offline /schema assets
            *publisher.ROUTES,  # publisher keys, registrations as signed
        ]),
        lifespan=[lifespan],
        middleware=[
            # trace and request ids, metrics, and the browser security headers (CSP, nosniff,
            # no referrer, no framing: registry/routes/console.py) in one layer
            observability_middleware(metrics, extra_headers=console.browser_headers),
            *([rate_limit_middleware(
                TokenBuckets(settings.rate_limit, settings.rate_burst or max(1, math.ceil(2 * settings.rate_limit))),
                settings.trusted_proxies,
            )] if settings.rate_limit > 0 else []),
            unstorable_guard,
        ],
        exception_handlers={Exception: handle_exception},
        request_max_body_size=settings.max_body,
        openapi_config=OpenAPIConfig(
            title="capreg",
            version="1.0.0",
            description="Capability registry and discovery service for AI agents.",
            path="/schema",
            components=api_docs.components(),  # bearer JWT: Swagger UI's Authorize button
            tags=api_docs.tags(),
            render_plugins=[console.OfflineSwaggerRenderPlugin()],  # no CDN: assets served by capreg
        ),
        debug=False,
    )
    answer_every_method(app)  # OPTIONS on a path served by two handlers lists both (registry.route_methods)
    return app
