"""Errors: one exception type carrying a code of docs/api.md#error-codes, and the one place that maps every exception
(ours, litestar's, asyncpg's) and every policy refusal (auth.policy.Refusal) to an
`application/problem+json` response.

No request ever gets a stack trace: unexpected exceptions are logged and answered with a generic 500.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from auth.policy import NOT_FOUND_CODE, REFUSAL_CODES, Refusal
from registry.core import error_codes as codes
from registry.core.error_codes import ErrorKind
from registry.core.json_pointer import escape_token
from registry.core.tracing import new_trace_id, trace_id_from
from registry.core.wire import Wire

if TYPE_CHECKING:
    import asyncpg
    from litestar import Request, Response
    from litestar.exceptions import HTTPException

# litestar and asyncpg are imported by the functions that answer with a response, not here: the
# schema worker processes (registry.core.bounded_work) import this module for ProblemError and
# ErrorItem alone, and each of them would carry both (about 16 MB of its RSS, docs/performance.md).

log = logging.getLogger("capreg.errors")

PROBLEM_MEDIA_TYPE = "application/problem+json"

TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    410: "Gone",
    413: "Payload Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class ErrorItem(Wire, omit_defaults=True):
    """One finding: where (`path`, a JSON pointer) or, for a replay, which `fixture`, and why."""

    message: str
    path: str | None = None
    kind: str | None = None
    fixture: str | None = None


class Problem(Wire, omit_defaults=True):
    """RFC 9457 problem details with capreg's `code` and the request's `traceId`."""

    type: str
    title: str
    status: int
    detail: str
    code: str
    trace_id: str | None = None
    errors: list[ErrorItem] | None = None
    missing_scopes: list[str] | None = None
    reason: str | None = None


class RefusalSubject(msgspec.Struct, frozen=True, kw_only=True):
    """What a refusal is about, as far as the service had resolved it when it refused: the tenant whose
    chain records it, the capability or resource ref, the scopes asked for, the principal acted for."""

    tenant: str | None = None
    ref: str | None = None
    scopes: tuple[str, ...] = ()
    on_behalf_of: str | None = None
    # The event type it is recorded as when not the operation's own (a registration's refused version
    # is `version.published`; reading an approval one may not see, `request.refused`).
    event: str | None = None


class ProblemError(Exception):
    """Raise to answer with a problem response: `kind` is a row of registry.core.error_codes (a code of
    docs/api.md#error-codes and its status)."""

    def __init__(
        self,
        kind: ErrorKind,
        detail: str,
        *,
        errors: list[ErrorItem] | None = None,
        headers: dict[str, str] | None = None,
        missing_scopes: list[str] | None = None,
        reason: str | None = None,
    ):
        super().__init__(detail)
        self.status, self.code, self.detail = kind.status, kind.code, detail
        self.errors, self.headers = errors, headers or {}
        self.missing_scopes, self.reason = missing_scopes, reason
        # Set by the service that refuses (`about`), read by the operation boundary that audits it
        # (registry.operations.boundary); `audited` once it is recorded, so it never is twice.
        self.subject: RefusalSubject | None = None
        self.audited = False

    def about(
        self,
        *,
        tenant: str | None,
        ref: str | None = None,
        scopes: Sequence[str] = (),
        on_behalf_of: str | None = None,
        event: str | None = None,
    ) -> ProblemError:
        """This error, saying what it refuses; the first subject given is kept (the innermost
        service resolved the most when it refused)."""
        if self.subject is None:
            self.subject = RefusalSubject(
                tenant=tenant, ref=ref, scopes=tuple(scopes), on_behalf_of=on_behalf_of, event=event
            )
        return self


def invalid_request(detail: str, errors: list[ErrorItem] | None = None) -> ProblemError:
    return ProblemError(codes.INVALID_REQUEST, detail, errors=errors)


def unacceptable_value(exc: asyncpg.exceptions.DataError, what: str = "a request value") -> ProblemError:
    """The caller's own 400 for a value PostgreSQL could not hold that no check caught (SQLSTATE class
    22: a NUL in text, an out-of-range number); `what` names the value as the caller sent it."""
    return invalid_request(f"{what} is not acceptable: {exc.__class__.__name__}")


def not_found(detail: str = "no such resource") -> ProblemError:
    return ProblemError(codes.NOT_FOUND, detail)


def invalid_token(detail: str) -> ProblemError:
    """401 with RFC 6750's challenge: `error_description` repeats the detail (a quoted-string, so
    quotes and backslashes in it are dropped rather than escaped, which clients parse unevenly)."""
    description = "".join(c for c in detail if c not in '"\\' and " " <= c <= "~")
    return ProblemError(
        codes.INVALID_TOKEN,
        detail,
        headers={"WWW-Authenticate": f'Bearer error="invalid_token", error_description="{description}"'},
    )


# Every refusal code auth.policy can decide has its row in the table: checked here, at import.
if missing := REFUSAL_CODES - codes.TABLE.codes():
    raise RuntimeError(f"auth.policy refusal codes without a row in registry.core.error_codes: {sorted(missing)}")


def refused(refusal: Refusal) -> ProblemError:
    """The problem for a policy refusal. `insufficient_scope` always carries `WWW-Authenticate` naming
    the missing scopes (RFC 6750), whichever decision refused."""
    headers = None
    if refusal.code == "insufficient_scope":
        headers = {"WWW-Authenticate": f'Bearer error="insufficient_scope", scope="{" ".join(refusal.missing_scopes)}"'}
    return ProblemError(
        codes.TABLE.of(refusal.code),
        refusal.message,
        headers=headers,
        missing_scopes=list(refusal.missing_scopes) or None,
        reason=refusal.reason,
    )


class StoredSubject(Protocol):
    """A stored record an operation acts on by its id (a ticket to revoke, an approval to decide):
    what a refusal of it names."""

    @property
    def tenant(self) -> str: ...
    @property
    def ref(self) -> str: ...
    @property
    def scopes(self) -> Sequence[str]: ...
    @property
    def on_behalf_of(self) -> str | None: ...


def refuse_on_record(refusal: Refusal | None, record: StoredSubject | None) -> None:
    """Raise `refusal` (if any) of an operation on `record`, found by an id the caller sent. A
    `not_found` names nothing, so the caller's own tenant's auditors never read of a record it may
    not know of; any other refusal names the record's tenant, ref, scopes and on-behalf-of."""
    if refusal is None:
        return
    if refusal.code == NOT_FOUND_CODE or record is None:
        raise refused(refusal).about(tenant=None)
    raise refused(refusal).about(
        tenant=record.tenant, ref=record.ref, scopes=sorted(set(record.scopes)), on_behalf_of=record.on_behalf_of
    )


_KEY_PART = re.compile(r"\[(\d+)\]|\.?([^.\[\]]+)")


def json_pointer(key: str) -> str:
    """litestar/msgspec key paths (`skills[0].id`, `$.a.b`) as JSON pointers (`/skills/0/id`)."""
    key = key.removeprefix("$")
    parts = [index or name for index, name in _KEY_PART.findall(key)]
    return "".join("/" + escape_token(p) for p in parts)


def decode_error_item(exc: msgspec.ValidationError | msgspec.DecodeError, type_: Any = None) -> ErrorItem:
    """msgspec's 'Expected `int`, got `str` - at `$.skills[0].id`' as a {path, message} item, in the
    caller's terms: malformed JSON says where, and an unknown enum value lists the allowed ones
    (read from `type_`, the type the body was decoded as, so the list cannot drift)."""
    message = str(exc)
    message, _, where = message.partition(" - at `")
    path = json_pointer(where.rstrip("`")) if where else ""
    if field := FIELD_REFUSAL.match(message):  # a Struct's own check of one field (registry.core.date_times)
        return ErrorItem(path=f"{path}/{field[1]}", message=field[2])
    if missing := _MISSING.match(message):
        return ErrorItem(path=f"{path}/{missing[1]}", message=_MISSING_SAYS.get(missing[1], "required, and missing"))
    if message == "Input data was truncated":
        return ErrorItem(path=path, message="the body is not valid JSON: it ends before the document does")
    if malformed := _MALFORMED.match(message):
        return ErrorItem(path=path, message=f"the body is not valid JSON ({malformed[1]}, at byte {malformed[2]})")
    if message.startswith("Invalid enum value") and type_ is not None:
        allowed = enum_values_at(type_, path)
        if allowed:
            listed = ", ".join(repr(v) for v in allowed)
            return ErrorItem(
                path=path, message=f"{message.removeprefix('Invalid enum value ')} is not one of: {listed}"
            )
    return ErrorItem(path=path, message=message)


_MALFORMED = re.compile(r"^JSON is malformed: (.*) \(byte (\d+)\)$")
_MISSING = re.compile(r"^Object missing required field `([^`]+)`$")
# Required fields whose absence needs more than "missing": what to send instead.
_MISSING_SAYS = {
    "scopes": "required: the scopes a caller must hold to see this skill's schemas and endpoints, "
    "or [] to say that any valid token may (there is no default)",
}


def enum_values_at(type_: Any, pointer: str) -> list[Any]:
    """The values the enum or literal at JSON `pointer` of a `type_` document allows (empty when
    the pointer does not lead to one)."""
    info: Any = msgspec.inspect.type_info(type_)
    for token in [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]:
        info = _step(_unwrapped(info), token)
        if info is None:
            return []
    values: list[Any] = []
    for one in _alternatives(_unwrapped(info)):
        if isinstance(one, msgspec.inspect.EnumType):
            values += [member.value for member in one.cls]
        elif isinstance(one, msgspec.inspect.LiteralType):
            values += list(one.values)
    return values


def _unwrapped(info: Any) -> Any:
    while isinstance(info, msgspec.inspect.Metadata):
        info = info.type
    return info


def _alternatives(info: Any) -> list[Any]:
    if isinstance(info, msgspec.inspect.UnionType):
        return [_unwrapped(t) for t in info.types]
    return [info]


def _step(info: Any, token: str) -> Any:
    """The type one pointer token below `info`, or None."""
    for one in _alternatives(info):
        if isinstance(one, msgspec.inspect.StructType):
            for field in one.fields:
                if field.encode_name == token:
                    return field.type
        elif isinstance(one, msgspec.inspect.ListType | msgspec.inspect.SetType | msgspec.inspect.FrozenSetType):
            return one.item_type
        elif isinstance(one, msgspec.inspect.VarTupleType):
            return one.item_type
        elif isinstance(one, msgspec.inspect.DictType):
            return one.value_type
    return None


# How a Struct's __post_init__ names the field it refuses: msgspec only knows the Struct's pointer.
FIELD_REFUSAL = re.compile(r"^field `([A-Za-z0-9_]+)`: (.*)$", re.S)


def _trace_id(request: Request) -> str:
    # Unmatched routes fail before app middleware runs, so fall back to the header itself.
    state = request.scope.get("state", {})
    if "trace_id" not in state:
        state["trace_id"] = trace_id_from(request.headers.get("traceparent")) or new_trace_id()
    return state["trace_id"]


def problem_of(error: ProblemError, trace_id: str | None) -> Problem:
    """The problem body of an error: HTTP answers carry it, and so do MCP tool refusals."""
    return Problem(
        type=f"https://capreg.dev/problems/{error.code}",
        title=TITLES.get(error.status, "Error"),
        status=error.status,
        detail=error.detail,
        code=error.code,
        trace_id=trace_id,
        errors=error.errors,
        missing_scopes=error.missing_scopes,
        reason=error.reason,
    )


# ARD (docs/api.md#ard) answers errors on /ard/* in its own envelope and codes (ARD Appendix B);
# statuses ARD does not name keep their status under the nearest code.
ARD_ERROR_CODES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "INVALID_ARGUMENT",
    409: "INVALID_ARGUMENT",
    413: "INVALID_ARGUMENT",
    415: "INVALID_ARGUMENT",
    429: "RATE_LIMIT_EXCEEDED",
    500: "INTERNAL_ERROR",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
}


class ArdError(msgspec.Struct):
    """ARD's `Error`: `{"errorCode", "message"}`."""

    errorCode: str
    message: str


def is_ard_path(path: str) -> bool:
    return path == "/ard" or path.startswith("/ard/")


def ard_error_body(error: ProblemError) -> bytes:
    code = ARD_ERROR_CODES.get(error.status, "INTERNAL_ERROR" if error.status >= 500 else "INVALID_ARGUMENT")
    message = error.detail
    details = [f"{item.path or '/'}: {item.message}" for item in (error.errors or [])[:5] if item.message != message]
    if details:
        message += " (" + "; ".join(details) + ")"
    return msgspec.json.encode(ArdError(errorCode=code, message=message))


def problem_response(request: Request, error: ProblemError) -> Response:
    from litestar import Response

    if is_ard_path(request.scope.get("path", "")):
        trace_id = _trace_id(request)
        return Response(
            content=ard_error_body(error),
            status_code=error.status,
            media_type="application/json",
            headers={**error.headers, "X-Trace-Id": trace_id},
        )
    trace_id = _trace_id(request)
    return Response(
        content=msgspec.json.encode(problem_of(error, trace_id)),
        status_code=error.status,
        media_type=PROBLEM_MEDIA_TYPE,
        headers={**error.headers, "X-Trace-Id": trace_id},
    )


async def send_problem(scope, send, error: ProblemError) -> None:
    """Answer from ASGI middleware (before routing) with the same problem shape handlers use."""
    state = scope.setdefault("state", {})
    trace_id = state.get("trace_id") or new_trace_id()
    if is_ard_path(scope.get("path", "")):
        body, media_type = ard_error_body(error), "application/json"
    else:
        body, media_type = (
            msgspec.json.encode(
                Problem(
                    type=f"https://capreg.dev/problems/{error.code}",
                    title=TITLES.get(error.status, "Error"),
                    status=error.status,
                    detail=error.detail,
                    code=error.code,
                    trace_id=trace_id,
                    errors=error.errors,
                    missing_scopes=error.missing_scopes,
                    reason=error.reason,
                )
            ),
            PROBLEM_MEDIA_TYPE,
        )
    headers = [
        (b"content-type", media_type.encode()),
        (b"content-length", str(len(body)).encode()),
        (b"x-trace-id", trace_id.encode()),
    ]
    headers += [(name.lower().encode(), value.encode()) for name, value in error.headers.items()]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _from_http_exception(exc: HTTPException) -> ProblemError:
    from litestar.exceptions import ValidationException

    status = exc.status_code
    if isinstance(exc, ValidationException) or (status == 400):
        errors = []
        for item in exc.extra if isinstance(exc.extra, list) else []:
            if isinstance(item, dict):
                source = getattr(item.get("source"), "value", item.get("source"))
                key = str(item.get("key", ""))
                # Body errors are JSON pointers into the body; parameter errors name the parameter.
                path = json_pointer(key) if source in (None, "body") else key
                errors.append(ErrorItem(path=path, message=str(item.get("message", ""))))
        detail = (
            "request body is not valid JSON"
            if "truncated" in str(exc.detail) or "malformed" in str(exc.detail).lower()
            else "the request is invalid"
        )
        return invalid_request(
            detail if not errors else "the request does not match the expected shape", errors or None
        )
    if status == 401:
        return invalid_token(str(exc.detail))
    if status == 404:
        return not_found()
    if status == 405:
        return ProblemError(codes.METHOD_NOT_ALLOWED, "method not allowed on this path", headers=exc.headers)
    if status == 413:
        return ProblemError(codes.PAYLOAD_TOO_LARGE, "request body exceeds CAPREG_MAX_BODY")
    if status == 415:
        return ProblemError(codes.UNSUPPORTED_MEDIA_TYPE, "unsupported media type")
    if status == 429:
        return ProblemError(
            codes.RATE_LIMITED, "too many requests", headers={"Retry-After": "1", **(exc.headers or {})}
        )
    if status == 503:
        return ProblemError(codes.RETRYABLE_UNAVAILABLE, "service unavailable", headers={"Retry-After": "1"})
    if status >= 500:
        return ProblemError(codes.INTERNAL_ERROR, "internal error")
    # a status the table does not name (litestar's own, never raised by capreg): the caller's 400
    return invalid_request(str(exc.detail))


def handle_exception(request: Request, exc: Exception) -> Response:
    import asyncpg
    from litestar.exceptions import HTTPException

    unavailable = (
        asyncpg.CannotConnectNowError,
        asyncpg.ConnectionDoesNotExistError,
        asyncpg.TooManyConnectionsError,
        asyncpg.InterfaceError,
        ConnectionError,
        OSError,
        TimeoutError,
    )
    if isinstance(exc, ProblemError):
        return problem_response(request, exc)
    if isinstance(exc, HTTPException):
        return problem_response(request, _from_http_exception(exc))
    if isinstance(exc, asyncpg.exceptions.DataError):
        return problem_response(request, unacceptable_value(exc))
    if isinstance(exc, RecursionError):
        # msgspec gives up on JSON nested deeper than the interpreter's recursion limit.
        return problem_response(request, invalid_request("request body nests too deeply"))
    if isinstance(exc, unavailable) or isinstance(exc, asyncpg.exceptions.PostgresConnectionError):
        log.warning("database unavailable: %r", exc)
        return problem_response(
            request,
            ProblemError(
                codes.RETRYABLE_UNAVAILABLE, "the database is unreachable; retry shortly", headers={"Retry-After": "2"}
            ),
        )
    if isinstance(exc, asyncpg.exceptions.QueryCanceledError):
        return problem_response(
            request,
            ProblemError(
                codes.RETRYABLE_UNAVAILABLE, "the query timed out; retry shortly", headers={"Retry-After": "1"}
            ),
        )
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return problem_response(request, ProblemError(codes.INTERNAL_ERROR, "internal error"))


def problem_responses(*statuses: int) -> dict[int, Any]:
    """OpenAPI response specs documenting the problem shape for the given statuses.

    400 (a malformed parameter), 429 (rate limited, when CAPREG_RATE_LIMIT is set) and 503 (database
    unreachable) can answer any API call.
    """
    from litestar.openapi.datastructures import ResponseSpec

    return {
        status: ResponseSpec(
            data_container=Problem, media_type=PROBLEM_MEDIA_TYPE, description=TITLES.get(status, "Error")
        )
        for status in sorted({400, 429, 503, *statuses})
    }
