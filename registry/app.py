"""The HTTP application: lifespan (database, migrations, keys), middleware, routes, OpenAPI."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from litestar import Litestar
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.plugins.prometheus import PrometheusConfig, PrometheusController
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from prometheus_client import REGISTRY, Gauge

from auth.keys import ensure_signing_key, load_keyring
from db.embedded import resolve_database_url
from db.migrate import apply_migrations
from db.pool import create_pool
from registry.config import Settings, load_settings
from registry.problems import handle_exception
from registry.routes import agents, audit, details, discovery, lifecycle, ops, tickets
from registry.service import ChangeWatcher, Registry
from registry.tracing import new_trace_id, trace_id_from

log = logging.getLogger("capreg")

def trace_middleware(app: ASGIApp) -> ASGIApp:
    """Adopt the W3C traceparent's trace id (or make one) and echo it as X-Trace-Id."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        traceparent = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"traceparent"), None)
        trace_id = trace_id_from(traceparent) or new_trace_id()
        scope.setdefault("state", {})["trace_id"] = trace_id

        async def send_with_trace(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or [])
                if not any(name.lower() == b"x-trace-id" for name, _ in headers):  # problem responses set it
                    headers.append((b"x-trace-id", trace_id.encode()))
                message["headers"] = headers
            await send(message)

        await app(scope, receive, send_with_trace)

    return middleware


class _PoolGauges:
    """Prometheus gauges reading the pool of whichever app is current in this process."""

    registry: Registry | None = None

    def __init__(self) -> None:
        existing = getattr(REGISTRY, "_names_to_collectors", {})
        if "capreg_db_pool_size" in existing:
            return
        Gauge("capreg_db_pool_size", "connections open in the pool").set_function(
            lambda: self.registry.pool.get_size() if self.registry else 0
        )
        Gauge("capreg_db_pool_idle", "idle connections in the pool").set_function(
            lambda: self.registry.pool.get_idle_size() if self.registry else 0
        )


_pool_gauges = _PoolGauges()


def create_app(settings: Settings | None = None) -> Litestar:
    settings = settings or load_settings()

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
            _pool_gauges.registry = registry
            checkpoints = audit.start_checkpoints(registry)
            try:
                yield
            finally:
                await audit.stop_checkpoints(checkpoints)
                await watcher.stop()
        finally:
            await pool.close()
            del embedded  # the embedded server handle stops the server when its last user exits

    prometheus = PrometheusConfig(app_name="capreg", prefix="capreg", group_path=True, exclude=["/metrics"])

    class Metrics(PrometheusController):
        path = "/metrics"
        include_in_schema = False

    return Litestar(
        route_handlers=[
            *agents.ROUTES, *discovery.ROUTES, *details.ROUTES, *lifecycle.ROUTES, *tickets.ROUTES,
            *audit.ROUTES, *ops.ROUTES, Metrics,
        ],
        lifespan=[lifespan],
        middleware=[trace_middleware, prometheus.middleware],
        exception_handlers={Exception: handle_exception},
        request_max_body_size=settings.max_body,
        openapi_config=OpenAPIConfig(
            title="capreg",
            version="1.0.0",
            description="Capability registry and discovery service for AI agents.",
            path="/schema",
            render_plugins=[SwaggerRenderPlugin()],
        ),
        debug=False,
    )
