"""A2A's JSON-RPC binding at the registry: what a JSON-RPC message sent to an agent's registry URL
asks for, and the JSON-RPC answers the registry gives (docs/api.md#a2a-json-rpc).

The registry serves cards, not tasks: the one method it answers is A2A 1.0's
`GetExtendedAgentCard` (the same card and checks as `GET .../extendedAgentCard`, registry.release.service);
every other method is A2A's unsupported-operation error, pointing at the extended card, where the
agent's own interfaces are. Pure functions over bytes and plain values: no I/O.

Messages are read strictly and bounded: a body over `MAX_MESSAGE_BYTES`, anything that is not one
JSON-RPC 2.0 request object (batches included), or params A2A does not define for the method, is
answered with the JSON-RPC error for it (-32700, -32600, -32602), never an HTTP error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import msgspec

JSONRPC_VERSION = "2.0"
EXTENDED_CARD_METHOD = "GetExtendedAgentCard"
# A GetExtendedAgentCard request is a few dozen bytes; nothing the registry answers needs more.
MAX_MESSAGE_BYTES = 16 * 1024
METHOD_MAX_LENGTH = 128
ID_MAX_LENGTH = 256

# JSON-RPC 2.0 codes, and A2A 1.0's codes for its own errors (A2A specification, JSON-RPC binding).
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
UNSUPPORTED_OPERATION = -32004
VERSION_NOT_SUPPORTED = -32009

# The reason each code carries in its google.rpc.ErrorInfo detail, as A2A servers send it.
_REASONS = {
    PARSE_ERROR: "PARSE_ERROR",
    INVALID_REQUEST: "INVALID_REQUEST",
    INVALID_PARAMS: "INVALID_PARAMS",
    UNSUPPORTED_OPERATION: "UNSUPPORTED_OPERATION",
    VERSION_NOT_SUPPORTED: "VERSION_NOT_SUPPORTED",
}
_ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"
_A2A_DOMAIN = "a2a-protocol.org"

UNSUPPORTED_MESSAGE = (
    "capreg is a capability registry: at this URL it serves only the agent's cards "
    f"({EXTENDED_CARD_METHOD}). Send tasks and messages to the agent itself: its own A2A "
    f"interfaces are listed in supportedInterfaces of the extended card ({EXTENDED_CARD_METHOD} here, "
    "or GET {url}/extendedAgentCard with a bearer token)."
)

_REQUEST_MEMBERS = frozenset({"jsonrpc", "id", "method", "params"})
_EXTENDED_CARD_PARAMS = frozenset({"tenant"})
_VERSION = re.compile(r"^(\d{1,4})\.(\d{1,4})(?:\.\d{1,4})?$")
SUPPORTED_VERSION = (1, 0)


@dataclass(frozen=True)
class RpcCall:
    """One well-formed JSON-RPC request: its id (echoed in the answer) and method."""

    id: str | int | None
    method: str


class RpcError(Exception):
    """A JSON-RPC error answer; `id` is the request's when it could be read, else None."""

    def __init__(self, code: int, message: str, id: str | int | None = None) -> None:  # noqa: A002
        super().__init__(message)
        self.code, self.message, self.id = code, message, id


def read_call(raw: bytes) -> RpcCall:
    """The request in `raw`, or RpcError: -32700 for bytes that are not JSON (or too large to be a
    request), -32600 for JSON that is not one JSON-RPC 2.0 request object, -32602 for params the
    method does not take."""
    if len(raw) > MAX_MESSAGE_BYTES:
        raise RpcError(INVALID_REQUEST, f"a JSON-RPC request here is at most {MAX_MESSAGE_BYTES} bytes")
    try:
        body = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        raise RpcError(PARSE_ERROR, "the body is not valid JSON") from None
    if isinstance(body, list):
        raise RpcError(INVALID_REQUEST, "batch requests are not supported: send one request object")
    if not isinstance(body, dict):
        raise RpcError(INVALID_REQUEST, "a JSON-RPC request is a JSON object")
    request_id = _request_id(body.get("id"))
    if body.get("jsonrpc") != JSONRPC_VERSION:
        raise RpcError(INVALID_REQUEST, "'jsonrpc' must be exactly \"2.0\"", request_id)
    if "id" in body and body["id"] is not None and request_id is None:
        raise RpcError(
            INVALID_REQUEST, f"'id' must be a string (at most {ID_MAX_LENGTH} characters), an integer or null"
        )
    unknown = sorted(set(body) - _REQUEST_MEMBERS)
    if unknown:
        raise RpcError(
            INVALID_REQUEST, "unknown member in the request object: only jsonrpc, id, method and params", request_id
        )
    method = body.get("method")
    if not isinstance(method, str) or not method or len(method) > METHOD_MAX_LENGTH:
        raise RpcError(
            INVALID_REQUEST,
            f"'method' must be a non-empty string of at most {METHOD_MAX_LENGTH} characters",
            request_id,
        )
    params = body.get("params", {})
    if not isinstance(params, dict):
        raise RpcError(
            INVALID_PARAMS if isinstance(params, list) else INVALID_REQUEST, "'params' must be an object", request_id
        )
    if method == EXTENDED_CARD_METHOD:
        _check_extended_card_params(params, request_id)
    return RpcCall(id=request_id, method=method)


def _request_id(value: Any) -> str | int | None:
    """The id to echo: a string or an integer (not a boolean, not a float), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and -(2**63) <= value < 2**63:
        return value
    if isinstance(value, str) and len(value) <= ID_MAX_LENGTH:
        return value
    return None


def _check_extended_card_params(params: dict[str, Any], request_id: str | int | None) -> None:
    """GetExtendedAgentCardRequest has one field, `tenant`; the registry's interface declares none,
    so only an empty one is meaningful."""
    if set(params) - _EXTENDED_CARD_PARAMS:
        raise RpcError(INVALID_PARAMS, f"{EXTENDED_CARD_METHOD} takes no params but an empty 'tenant'", request_id)
    if params.get("tenant", "") != "":
        raise RpcError(
            INVALID_PARAMS,
            "the registry's interface has no A2A tenant: leave 'tenant' out (the URL names the agent)",
            request_id,
        )


def check_version(header: str | None, request_id: str | int | None) -> None:
    """The A2A-Version header, when sent, must name 1.0 (patch ignored); absent means the card's 1.0."""
    if header is None or header.strip() == "":
        return
    match = _VERSION.match(header.strip())
    if match is None or (int(match.group(1)), int(match.group(2))) != SUPPORTED_VERSION:
        raise RpcError(VERSION_NOT_SUPPORTED, "this interface speaks A2A protocol version 1.0 only", request_id)


def unsupported(call: RpcCall) -> RpcError:
    """Every method but GetExtendedAgentCard (the method name is not echoed: it is caller data)."""
    return RpcError(UNSUPPORTED_OPERATION, UNSUPPORTED_MESSAGE, call.id)


def result_message(request_id: str | int | None, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC_VERSION, "id": request_id, "result": result}


def error_message(error: RpcError) -> dict[str, Any]:
    """The JSON-RPC error response, with A2A's ErrorInfo detail (what a2a-sdk reads `data` as)."""
    return {
        "jsonrpc": JSONRPC_VERSION,
        "id": error.id,
        "error": {
            "code": error.code,
            "message": error.message,
            "data": [
                {"@type": _ERROR_INFO_TYPE, "reason": _REASONS[error.code], "domain": _A2A_DOMAIN, "metadata": {}}
            ],
        },
    }
