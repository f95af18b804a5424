"""HTTP: `/mcp`, the Model Context Protocol endpoint (Streamable HTTP; the protocol and tools are in
registry.mcp.jsonrpc and registry.mcp.tools).

The caller is authenticated here exactly as on every other endpoint: no Authorization header is an
anonymous caller, a token that fails is 401 problem+json with WWW-Authenticate (before any JSON-RPC
is read), and the body limit, rate limits and trace ids are the app's. A stateless server offers no
SSE stream and no session to delete: GET and DELETE are 405.

As the MCP authorization specification (2025-06-18) asks of a resource server, the 401 of `/mcp`
names where tokens come from: `WWW-Authenticate: Bearer resource_metadata="..."` points at
`/.well-known/oauth-protected-resource`, RFC 9728 metadata listing the issuers capreg trusts.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

import msgspec
from litestar import Request, Response, get, post

from auth.policy import REGISTRY_SCOPES
from registry.config import Settings, registry_url
from registry.core.problems import ProblemError
from registry.mcp.jsonrpc import handle
from registry.state import registry_of, trace_id_of
from registry.web.authentication import optional_caller

METADATA_PATH = "/.well-known/oauth-protected-resource"

_JSON = "application/json"


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def _origin_allowed(origin: str, public_url: str | None, request_url: str) -> bool:
    """A browser's Origin may only be the registry's own. With CAPREG_PUBLIC_URL that is the one
    origin; without it, the Host header names the origin, which a DNS-rebinding page controls, so it
    is believed only for loopback and IP-literal hosts (which no rebinding can rename)."""
    if public_url:
        return origin.lower() == _origin(public_url)
    if origin.lower() != _origin(request_url):
        return False
    host = (urlsplit(request_url).hostname or "").strip("[]")
    if host == "localhost":
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@post("/mcp", include_in_schema=False, status_code=200)
async def mcp_endpoint(request: Request) -> Response:
    registry = registry_of(request)
    # Browsers send Origin: a page of another site must not reach the registry through a browser
    # (DNS rebinding), as the transport specification requires.
    origin = request.headers.get("origin")
    if origin is not None and not _origin_allowed(origin, registry.settings.public_url, str(request.base_url)):
        body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Origin not allowed"}}
        return Response(msgspec.json.encode(body), status_code=403, media_type=_JSON)
    try:
        caller = await optional_caller(request)
    except ProblemError as error:
        raise with_resource_metadata(error, registry.settings) from None
    exchange = await handle(
        registry,
        caller,
        await request.body(),
        protocol_version=request.headers.get("mcp-protocol-version"),
        trace_id=trace_id_of(request),
    )
    if exchange.body is None:
        return Response(b"", status_code=exchange.status)
    return Response(msgspec.json.encode(exchange.body), status_code=exchange.status, media_type=_JSON)


def with_resource_metadata(error: ProblemError, settings: Settings) -> ProblemError:
    """A 401 whose challenge also names the protected-resource metadata, so an MCP client can find
    the authorization servers without being told (RFC 9728 section 5.1)."""
    challenge = error.headers.get("WWW-Authenticate", "Bearer")
    if error.status == 401 and "resource_metadata=" not in challenge:
        error.headers["WWW-Authenticate"] = f'{challenge}, resource_metadata="{registry_url(settings)}{METADATA_PATH}"'
    return error


class ProtectedResource(msgspec.Struct, kw_only=True):
    """RFC 9728 protected-resource metadata of `/mcp` (its member names are the RFC's)."""

    resource: str
    authorization_servers: list[str]
    scopes_supported: list[str]
    bearer_methods_supported: list[str]
    resource_name: str
    resource_documentation: str


@get(METADATA_PATH, summary="OAuth protected-resource metadata of /mcp (RFC 9728): where its tokens come from")
async def protected_resource(request: Request) -> Response[ProtectedResource]:
    settings = registry_of(request).settings
    base = registry_url(settings)
    servers = [settings.issuer, *(trusted.issuer for trusted in settings.trusted_issuers)]
    metadata = ProtectedResource(
        resource=f"{base}/mcp",
        authorization_servers=list(dict.fromkeys(servers)),
        scopes_supported=list(REGISTRY_SCOPES),
        bearer_methods_supported=["header"],
        resource_name="capreg",
        resource_documentation=f"{base}/schema",
    )
    return Response(metadata, headers={"Cache-Control": "public, max-age=60"})


ROUTES = [mcp_endpoint, protected_resource]
