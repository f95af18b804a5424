"""The MCP server behind `/mcp`: JSON-RPC 2.0 messages of the Model Context Protocol (Streamable
HTTP transport, revisions 2025-03-26 to 2025-11-25): `handle` answers one POSTed message
(initialize, ping, tools/list, tools/call; the tools are registry.mcp.tools).

Stateless: no `Mcp-Session-Id` is issued and nothing is kept between requests, so any replica
answers any request. Every request is answered with one JSON body (no SSE streams; GET is 405).
Malformed JSON-RPC is a JSON-RPC error; a call of an unknown tool is an `invalid params` error.
"""

from __future__ import annotations

from typing import Any

import msgspec

from auth.principal import Caller
from registry.core import error_codes as codes
from registry.mcp.tools import INSTRUCTIONS, TOOL_LIST, TOOLS, Call, call_tool
from registry.state import Registry

# Newest first. Streamable HTTP exists since 2025-03-26; a client asking for another revision is
# offered the newest (the client decides whether to go on).
PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26")
# What a request without an MCP-Protocol-Version header is taken to speak (the transport spec's rule).
ASSUMED_PROTOCOL_VERSION = "2025-03-26"
SERVER_VERSION = "1.0.0"

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602


class Exchange(msgspec.Struct, frozen=True):
    """The HTTP answer to one POST: its status and JSON body (None: 202 Accepted, no body)."""

    status: int
    body: dict[str, Any] | None


def _error(id_: Any, code: int, message: str, data: Any = None, *, status: int = 200) -> Exchange:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return Exchange(status, {"jsonrpc": "2.0", "id": id_, "error": error})


def _malformed(id_: Any, code: int, message: str, data: Any = None) -> Exchange:
    """A message the transport cannot take: JSON-RPC's error, answered with invalid_request's status."""
    return _error(id_, code, message, data, status=codes.INVALID_REQUEST.status)


def _result(id_: Any, result: dict[str, Any]) -> Exchange:
    return Exchange(200, {"jsonrpc": "2.0", "id": id_, "result": result})


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def unsupported_version(version: str) -> Exchange | None:
    """The 400 for an MCP-Protocol-Version header this server does not speak, else None."""
    if version in PROTOCOL_VERSIONS:
        return None
    return _malformed(
        None,
        INVALID_REQUEST,
        f"unsupported MCP-Protocol-Version {version[:64]!r}",
        {"supported": list(PROTOCOL_VERSIONS)},
    )


async def handle(
    registry: Registry, caller: Caller | None, raw: bytes, *, protocol_version: str | None, trace_id: str | None
) -> Exchange:
    """Answer one POSTed JSON-RPC message (the caller is already authenticated, or anonymous)."""
    try:
        message = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return _malformed(None, PARSE_ERROR, "the body is not JSON")
    if isinstance(message, list):
        return _malformed(None, INVALID_REQUEST, "batches are not supported: send one JSON-RPC message per request")
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return _malformed(None, INVALID_REQUEST, "not a JSON-RPC 2.0 message")
    method = message.get("method")
    if method is None:
        if "id" in message and ("result" in message or "error" in message):
            return Exchange(
                202, None
            )  # a response to a server request: this server sends none, so nothing waits for it
        return _malformed(None, INVALID_REQUEST, "a JSON-RPC message needs a `method`")
    if not isinstance(method, str):
        return _malformed(None, INVALID_REQUEST, "`method` must be a string")
    params = message.get("params")
    if params is not None and not isinstance(params, dict):
        return _malformed(
            message.get("id") if _valid_id(message.get("id")) else None, INVALID_REQUEST, "`params` must be an object"
        )
    if "id" not in message:
        return Exchange(202, None)  # notifications (initialized, cancelled...) need nothing from a stateless server
    id_ = message["id"]
    if not _valid_id(id_):
        return _malformed(None, INVALID_REQUEST, "`id` must be a string or an integer")
    params = params or {}

    if method == "initialize":
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            return _error(id_, INVALID_PARAMS, "initialize needs `protocolVersion` (a string)")
        return _result(
            id_,
            {
                "protocolVersion": requested if requested in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0],
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": "capreg", "title": "capreg capability registry", "version": SERVER_VERSION},
                "instructions": INSTRUCTIONS,
            },
        )
    if protocol_version is not None and (refusal := unsupported_version(protocol_version)) is not None:
        return msgspec.structs.replace(refusal, body={**(refusal.body or {}), "id": id_})
    if method == "ping":
        return _result(id_, {})
    if method == "tools/list":
        return _result(id_, {"tools": TOOL_LIST})
    if method == "tools/call":
        name, arguments = params.get("name"), params.get("arguments")
        if not isinstance(name, str):
            return _error(id_, INVALID_PARAMS, "tools/call needs `name` (a string)")
        tool = TOOLS.get(name)
        if tool is None:
            return _error(id_, INVALID_PARAMS, f"unknown tool {name[:128]!r}", {"tools": list(TOOLS)})
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return _error(id_, INVALID_PARAMS, "`arguments` must be an object")
        return _result(id_, await call_tool(Call(registry, caller, trace_id), tool, arguments))
    return _error(id_, METHOD_NOT_FOUND, f"method {method[:128]!r} is not supported by this server")
