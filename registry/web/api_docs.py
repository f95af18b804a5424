"""How the OpenAPI document groups and secures the API: the bearer-JWT security scheme, each
operation's security (token required, optional, or none) and its tag (one area of docs/api.md).

Applied to copies of the route handlers when the app is built (registry.app), by path and method,
so a route module declares only what its handlers do; `/schema` (Swagger UI) then shows grouped
operations and an Authorize button. tests/web/test_openapi_docs.py checks that what the document says
about tokens is what the server does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from copy import copy
from typing import Any

from litestar.handlers import HTTPRouteHandler
from litestar.openapi.spec import Components, SecurityScheme, Tag

BEARER_SCHEME = "bearerJWT"

SECURITY_SCHEMES = {
    BEARER_SCHEME: SecurityScheme(
        type="http",
        scheme="bearer",
        bearer_format="JWT",
        description=(
            "A caller token: a JWT from capreg (`capreg token mint`, typ at+jwt) or a trusted issuer "
            "(CAPREG_TRUSTED_ISSUERS), with `tenant`, `scope` and optional `regions` claims. "
            "A presented token must be valid on every endpoint, also where none is needed."
        ),
    )
}

# The areas of the API, in the order /schema lists them.
AREAS = {
    "agents": "Register agents, their public views and A2A public cards, heartbeats.",
    "discovery": "Find capabilities by public metadata; the change feed.",
    "release": "Capability detail, the A2A extended card (HTTP+JSON and JSON-RPC), tools, argument validation: after tenant, scope and region checks.",
    "versions": "Version history, deprecation, retirement, compatibility checks.",
    "tickets": "Delegation tickets: mint, re-delegate, introspect, revoke, list.",
    "approvals": "Approvals of tickets for capabilities that require one.",
    "audit": "The audit log, grant reports, the signed chain checkpoint.",
    "offers": "Which capability, which version, which instance, now: ranked offers with an optional ticket.",
    "ard": "Agentic Resource Discovery: the manifest and the ARD registry API over discovery.",
    "ops": "Probes and the registry's public keys.",
}

_SKILL_VERSIONS = r"^/v1/agents/[^/]+/[^/]+/skills/[^/]+/versions"
# (pattern over the path, methods or None for all, area); the first match wins.
_AREA_RULES: list[tuple[re.Pattern[str], frozenset[str] | None, str]] = [
    (re.compile(_SKILL_VERSIONS + r"/[^/]+/(deprecate|retire|replays)$"), None, "versions"),
    (re.compile(_SKILL_VERSIONS + r"$"), None, "versions"),
    (re.compile(_SKILL_VERSIONS + r"/[^/]+(/tool|/validate)?$"), None, "release"),
    (re.compile(r"^/v1/agents/[^/]+/[^/]+/extendedAgentCard$"), None, "release"),
    (re.compile(r"^/v1/agents/[^/]+/[^/]+$"), frozenset({"POST"}), "release"),  # the JSON-RPC binding
    (re.compile(r"^/v1/agents/"), None, "agents"),
    (re.compile(r"^/v1/(capabilities|changes)(/|$)"), None, "discovery"),
    (re.compile(r"^/v1/compatibility$"), None, "versions"),
    (re.compile(r"^/v1/tickets(/|$)"), None, "tickets"),
    (re.compile(r"^/v1/offers$"), None, "offers"),
    (re.compile(r"^/v1/tenants/[^/]+/publisher-keys$"), None, "agents"),
    (re.compile(r"^/(ard(/|$)|\.well-known/ard\.json$)"), None, "ard"),
    (re.compile(r"^/v1/approvals(/|$)"), None, "approvals"),
    (re.compile(r"^/v1/audit(/|$)"), None, "audit"),
    (re.compile(r"^/(healthz|readyz|metrics|\.well-known/)"), None, "ops"),
]

REQUIRED: list[dict[str, list[str]]] = [{BEARER_SCHEME: []}]
# OpenAPI's way of saying "anonymous, or with a bearer token".
OPTIONAL: list[dict[str, list[str]]] = [{}, {BEARER_SCHEME: []}]

# Operations anonymous callers may use (a token adds what its tenant may see); (method, path).
_OPTIONAL_TOKEN = {
    ("GET", "/v1/capabilities"),
    ("GET", "/v1/changes"),
    ("GET", "/v1/agents/{tenant}/{agent_id}"),
    ("GET", "/v1/agents/{tenant}/{agent_id}/.well-known/agent-card.json"),
    ("GET", "/v1/agents/{tenant}/{agent_id}/skills/{skill_id}/versions"),
    ("GET", "/v1/audit/checkpoints/latest"),
    # The JSON-RPC binding: malformed and unsupported calls are answered to anyone;
    # GetExtendedAgentCard, its one method, is 401 without a token (registry.a2a.routes).
    ("POST", "/v1/agents/{tenant}/{agent_id}"),
    # ARD: anonymous callers see public agents, as in discovery
    ("GET", "/.well-known/ard.json"),
    ("POST", "/ard/search"),
    ("GET", "/ard/agents"),
    ("GET", "/ard/agents/{identifier}"),
    ("POST", "/ard/explore"),
}
# Operations that never look at a token.
_NO_TOKEN = {
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/.well-known/jwks.json"),
    ("GET", "/.well-known/oauth-protected-resource"),
}

_PATH_TYPE = re.compile(r"\{([^}:]+):[^}]+\}")


def openapi_path(path: str) -> str:
    """A litestar route path as OpenAPI writes it: `{tenant:str}` -> `{tenant}`."""
    return _PATH_TYPE.sub(r"{\1}", path)


def area_of(method: str, path: str) -> str:
    """The tag of an operation; a path no rule knows is tagged by its first segment after /v1."""
    for pattern, methods, area in _AREA_RULES:
        if pattern.search(path) and (methods is None or method in methods):
            return area
    segments = [s for s in path.split("/") if s and s != "v1"]
    return segments[0] if segments else "ops"


def security_of(method: str, path: str) -> list[dict[str, list[str]]]:
    if (method, path) in _NO_TOKEN:
        return []
    if (method, path) in _OPTIONAL_TOKEN:
        return OPTIONAL
    return REQUIRED


def documented(handlers: Iterable[Any]) -> list[Any]:
    """Copies of `handlers` carrying their OpenAPI tag and security (other route objects, such as
    static file routers, unchanged)."""
    result = []
    for handler in handlers:
        if isinstance(handler, HTTPRouteHandler) and handler.include_in_schema is not False:
            method = sorted(handler.http_methods)[0]
            path = openapi_path(sorted(handler.paths)[0])
            handler = copy(handler)
            handler.tags = [area_of(method, path)]
            handler.security = security_of(method, path) or None
        result.append(handler)
    return result


def components() -> Components:
    return Components(security_schemes=dict(SECURITY_SCHEMES))


def tags() -> list[Tag]:
    return [Tag(name=name, description=description) for name, description in AREAS.items()]
