"""HTTP: liveness, readiness and the JWKS."""

from __future__ import annotations

from litestar import Request, Response, get

from db.migrate import pending_migrations
from registry.state import registry_of
from registry.wire import Wire


class Health(Wire):
    status: str


class Readiness(Wire):
    status: str
    database: str
    pending_migrations: list[str]


class Jwks(Wire):
    keys: list[dict]


@get("/healthz", summary="Process is up", exclude_from_auth=True)
async def healthz() -> Health:
    return Health(status="ok")


@get("/readyz", summary="Database reachable and migrations current")
async def readyz(request: Request) -> Response[Readiness]:
    registry = registry_of(request)
    try:
        async with registry.pool.acquire(timeout=2) as conn:
            pending = await pending_migrations(conn)
    except Exception:
        return Response(Readiness(status="unavailable", database="unreachable", pending_migrations=[]),
                        status_code=503, headers={"Retry-After": "2"})
    ready = not pending
    return Response(
        Readiness(status="ready" if ready else "migrations pending", database="ok", pending_migrations=pending),
        status_code=200 if ready else 503,
    )


@get("/.well-known/jwks.json", summary="capreg's public signing keys (current and still-valid previous)")
async def jwks(request: Request) -> Response[Jwks]:
    registry = registry_of(request)
    await registry.refresh_keyring()
    return Response(Jwks(keys=registry.keyring.jwks), headers={"Cache-Control": "public, max-age=60"})


ROUTES = [healthz, readyz, jwks]
