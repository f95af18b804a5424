"""Query parameters a route does not declare are refused, on every route, in one place.

A query string is read by name: a misspelt filter (`?sideEffect=none` for `sideEffectMax`, `?tpye=`
for `type`) would otherwise be ignored and the answer would be wider than the caller asked for (for
a router filtering by side effect, a safety defect). Bodies already refuse unknown members
(registry.web.request_guard); this is the same rule for the query.

What each route accepts is what litestar itself reads for it: the query parameters of the route
handler's kwargs model (its signature and its dependencies', under their aliases, as the OpenAPI
document shows them), learnt once from the built app (`DeclaredQueries.learn`). The screen runs in
the outer middleware's pass, after routing and before the handler, so before any authentication,
lookup or cache: an unknown parameter is `400 invalid_request` whatever the token (nothing is
looked up, so nothing leaks) and is not audited (nothing was decided). Repeating a declared name
(`tag=a&tag=b`) is not refused here; the handler's own parsing decides what a repeat means.

Not screened: `OPTIONS` (a CORS preflight repeats the URL of the request it precedes, query
included) and the routes in `FREE_FORM`, whose query another protocol defines.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from litestar import Litestar
from litestar.routes import HTTPRoute
from litestar.types import ASGIApp, Receive, Scope, Send

from registry.core.problems import ErrorItem, ProblemError, invalid_request, send_problem

# Path templates whose query is not capreg's to define: OAuth 2's redirect back to Swagger UI
# carries what the authorization server sends (`code`, `state`, `error`, ...; RFC 6749 section 4.1.2).
FREE_FORM = frozenset({"/schema/oauth2-redirect.html"})

# Methods never screened: a preflight's query is the one of the request it asks about.
_UNSCREENED_METHODS = frozenset({"OPTIONS"})


def query_names(query_string: bytes) -> list[str]:
    """The parameter names of a raw query string, percent-decoded as litestar decodes them, in order
    of first appearance."""
    names = dict.fromkeys(
        name for name, _ in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True, errors="replace")
    )
    return list(names)


def unknown_parameter(operation: str, unknown: list[str], accepted: frozenset[str]) -> ProblemError:
    """The 400 naming every unknown parameter (one `errors` item each, `path` the parameter name)
    and the parameters `operation` (`GET /v1/capabilities`) accepts."""
    if accepted:
        takes = "takes only " + ", ".join(sorted(accepted))
        hint = "check the spelling against the list"
    else:
        takes = "takes no query parameters"
        hint = "remove it"
    names = ", ".join(repr(name) for name in unknown)
    plural = "s" if len(unknown) > 1 else ""
    detail = f"unknown query parameter{plural} {names}: {operation} {takes}; {hint}"
    items = [ErrorItem(path=name, message=f"not a query parameter of {operation}") for name in unknown]
    return invalid_request(detail, items)


class DeclaredQueries:
    """The query parameter names each route handler of an app declares; `screen` refuses the others."""

    def __init__(self) -> None:
        # id(route handler) -> (its operation, the names it accepts); filled once by `learn`, read on
        # every request with a query string.
        self._accepted: dict[int, tuple[str, frozenset[str]]] = {}

    def learn(self, app: Litestar) -> None:
        """Read every HTTP route's declared query parameters from the built app (once, at start-up)."""
        accepted: dict[int, tuple[str, frozenset[str]]] = {}
        for route in app.routes:
            if not isinstance(route, HTTPRoute) or route.path_format in FREE_FORM:
                continue
            for method, (handler, kwargs_model) in route.route_handler_map.items():
                if method in _UNSCREENED_METHODS:
                    continue
                names = frozenset(p.field_alias for p in kwargs_model.expected_query_params)
                accepted[id(handler)] = (f"{method} {route.path_format}", names)
        self._accepted = accepted

    def accepted(self, handler: object) -> frozenset[str] | None:
        """The names `handler` accepts; None when it is not screened."""
        known = self._accepted.get(id(handler))
        return known[1] if known is not None else None

    def screen(self, scope: Scope) -> ASGIApp | None:
        """None when every query parameter of the request is one its route declares (or the route is
        not screened); else the ASGI app that answers the 400."""
        query = scope.get("query_string")
        if not query:
            return None
        known = self._accepted.get(id(scope.get("route_handler")))
        if known is None:
            return None
        operation, accepted = known
        unknown = [name for name in query_names(query) if name not in accepted]
        if not unknown:
            return None
        error = unknown_parameter(operation, unknown, accepted)

        async def answer(scope: Scope, receive: Receive, send: Send) -> None:
            await send_problem(scope, send, error)

        return answer
