"""HTTP: liveness, readiness and the JWKS."""

from __future__ import annotations

from litestar import Request, Response, get

from registry.core.wire import Wire
from registry.ops.readiness import Readiness, readiness
from registry.state import registry_of


class Health(Wire):
    status: str


class Jwks(Wire):
    keys: list[dict]


@get("/healthz", summary="Process is up", exclude_from_auth=True)
async def healthz() -> Health:
    return Health(status="ok")


@get("/readyz", summary="Database reachable and migrations current")
async def readyz(request: Request) -> Response[Readiness]:
    state = await readiness(registry_of(request))
    if state.database == "unreachable":
        return Response(state, status_code=503, headers={"Retry-After": "2"})
    return Response(state, status_code=200 if state.status == "ready" else 503)


@get("/.well-known/jwks.json", summary="capreg's public signing keys (current and still-valid previous)")
async def jwks(request: Request) -> Response[Jwks]:
    registry = registry_of(request)
    await registry.refresh_keyring()
    return Response(Jwks(keys=registry.keyring.jwks), headers={"Cache-Control": "public, max-age=60"})


ROUTES = [healthz, readyz, jwks]
