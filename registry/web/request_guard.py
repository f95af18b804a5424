"""What every request must be before a handler acts on it: a body of exactly its declared types, and
no value PostgreSQL cannot store (registry.core.storable) anywhere (path, query, headers, body).

Such a value is the caller's own 400 `invalid_request`, decided here, before anything is written,
so it can never reach a transaction shared with other requests (db.group_commit). The refusal of an
authenticated caller is audited as `request.refused`, with the offending value escaped; an
unauthenticated one is not (anyone could grow the chain), only answered.

Bodies are decoded by msgspec with the handler's own type, strictly: `"30"`, `30.0` or `true` where
an integer is expected is 400 (litestar's own body parsing converts leniently).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import unquote_to_bytes

import msgspec
from litestar import Request
from litestar.di import Provide
from litestar.params import JSONBody
from litestar.types import ASGIApp, Receive, Scope, Send

from db.unstorable import escaped, unstorable
from registry.core.problems import ErrorItem, ProblemError, decode_error_item, invalid_request, send_problem
from registry.core.storable import unstorable_pointer
from registry.operations.refusals import refuse_request
from registry.web.authentication import optional_caller

T = TypeVar("T")


def _unstorable_part(scope: Scope) -> tuple[str, str] | None:
    """Where in the request line or headers an unstorable value is, if anywhere, and what it is."""
    if unstorable(scope["path"]):
        return "path", "the path contains a character that cannot be stored (NUL)"
    query = scope.get("query_string") or b""
    if b"%00" in query and b"\x00" in unquote_to_bytes(query):
        return "query", "the query contains a character that cannot be stored (NUL)"
    for name, value in scope["headers"]:
        if b"\x00" in value:
            return f"header:{name.decode('latin-1')}", "the header contains a NUL character"
    return None


async def refuse_unstorable(request: Request, path: str, message: str) -> ProblemError:
    """The 400 for an unstorable value at `path`; audited (escaped) when the caller is authenticated."""
    item = ErrorItem(path=path, message=message)
    error = invalid_request("the request contains a value that cannot be stored", [item])
    try:
        caller = await optional_caller(request)
    except ProblemError:
        caller = None
    error = await refuse_request(request, caller, error, reason=f"invalid_request: {escaped(path)}"[:512])
    error.audited = True  # anonymous: nothing to record, nor later
    return error


def unstorable_screen(scope: Scope) -> ASGIApp | None:
    """None when the path, query and headers of an HTTP request hold no unstorable value; else the
    ASGI app that answers its 400 (audited as refuse_unstorable says). For the one outer middleware
    to run in its own pass (registry.web.observability) when no layer must come between them."""
    part = _unstorable_part(scope)
    if part is None:
        return None
    path, message = part

    async def answer(scope: Scope, receive: Receive, send: Send) -> None:
        request: Request = Request(scope, receive)
        await send_problem(scope, send, await refuse_unstorable(request, path, message))

    return answer


Screen = Callable[[Scope], ASGIApp | None]


def screens(*each: Screen) -> Screen:
    """One screen asking each of `each` in order: the first that answers, answers."""

    def screen(scope: Scope) -> ASGIApp | None:
        for one in each:
            if (answer := one(scope)) is not None:
                return answer
        return None

    return screen


def screen_guard(screen: Screen) -> Callable[[ASGIApp], ASGIApp]:
    """ASGI middleware: a request `screen` answers never reaches a handler (the screens as a layer
    of their own, for when the rate limiter must run before them)."""

    def wrap(app: ASGIApp) -> ASGIApp:
        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http" or (answer := screen(scope)) is None:
                await app(scope, receive, send)
                return
            await answer(scope, receive, send)

        return middleware

    return wrap


def decode_strict(raw: bytes, type_: type[T]) -> T:
    """`raw` as `type_` with msgspec's strict typing; 400 `invalid_request` with a JSON pointer."""
    if not raw.strip():
        raise invalid_request(
            "the request needs a JSON body",
            [ErrorItem(path="", message="the body is empty: send a JSON document (Content-Type: application/json)")],
        )
    try:
        return msgspec.json.decode(raw, type=type_)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        item = decode_error_item(exc, type_)
        summary = (
            "the request body is not valid JSON"
            if item.message.startswith("the body is not valid JSON")
            else "the request body does not match the expected shape"
        )
        raise invalid_request(summary, [item]) from None
    except RecursionError:  # nesting deeper than the decoder can follow
        raise invalid_request(
            "request body is nested too deeply",
            [ErrorItem(path="", message="JSON nesting exceeds the decoder's limit")],
        ) from None


async def read_body(request: Request, type_: type[T]) -> T:
    """The one way a handler reads its JSON body: strict types, and no value PostgreSQL cannot store."""
    raw = await request.body()
    value = decode_strict(raw, type_)
    # JSON can only spell NUL as an escape (a raw control character is malformed, a lone surrogate
    # msgspec refuses): documents without one need no walk.
    if b"\\u0000" in raw:
        pointer = unstorable_pointer(msgspec.json.decode(raw))
        if pointer is not None:
            raise await refuse_unstorable(request, pointer, "a string contains a character that cannot be stored (NUL)")
    return value


def body_schema(type_: type[Any]) -> dict[str, Provide]:
    """`dependencies=` for a handler that reads its body with read_body: declares the body for
    OpenAPI without letting litestar parse it (never called)."""

    async def declare(data: Any) -> None:
        """Never called."""

    # An annotation made at run time, for litestar to read: no static type to check.
    declare.__annotations__ = {"data": JSONBody[type_], "return": None}  # type: ignore[valid-type, misc]
    return {f"{type_.__name__.lower()}_body": Provide(declare)}
