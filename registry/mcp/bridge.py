"""`capreg mcp`: an MCP server on stdin/stdout that forwards every message to a registry's `/mcp`
endpoint, for MCP clients that only launch local servers.

Messages are newline-delimited JSON-RPC (the MCP stdio transport). Each one is POSTed as it is,
with the bearer token and the negotiated MCP-Protocol-Version; the registry's JSON answer is written
back as one line. Requests run concurrently (answers may come back out of order, as JSON-RPC
allows). An HTTP refusal without a JSON-RPC body (401 for a bad token, 413, 429, 503) becomes a
JSON-RPC error for that request carrying the problem body as `data`. Nothing but JSON-RPC is ever
written to stdout; diagnostics go to stderr.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any, BinaryIO

import httpx
import msgspec

# A line longer than this is not read into memory; the registry's own body limit is lower.
MAX_LINE_BYTES = 4 * 1024 * 1024
REQUEST_TIMEOUT_SECONDS = 60.0
INVALID_REQUEST = -32600
INTERNAL_ERROR = -32603


class Bridge:
    def __init__(self, url: str, token: str | None, stdout: BinaryIO, client: httpx.AsyncClient):
        self.endpoint = url.rstrip("/") + "/mcp"
        self.token = token
        self.stdout = stdout
        self.client = client
        self.protocol_version: str | None = None
        self._write_lock = asyncio.Lock()

    async def write(self, message: dict[str, Any]) -> None:
        async with self._write_lock:
            self.stdout.write(msgspec.json.encode(message) + b"\n")
            self.stdout.flush()

    async def error(self, id_: Any, code: int, message: str, data: Any = None) -> None:
        error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        await self.write({"jsonrpc": "2.0", "id": id_, "error": error})

    async def forward(self, line: bytes, message: Any) -> None:
        """POST one message (`message` is `line` decoded, None when it is not JSON) and write the answer."""
        is_dict = isinstance(message, dict)
        method = message.get("method") if is_dict else None
        id_ = message.get("id") if is_dict else None
        expects_answer = not is_dict or (method is not None and "id" in message)
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if self.protocol_version and method != "initialize":
            headers["MCP-Protocol-Version"] = self.protocol_version
        try:
            response = await self.client.post(self.endpoint, content=line, headers=headers)
        except httpx.HTTPError as exc:
            print(f"capreg mcp: {self.endpoint} unreachable: {exc!r}", file=sys.stderr)
            if expects_answer:
                await self.error(id_, INTERNAL_ERROR, f"the registry at {self.endpoint} is unreachable")
            return
        if response.status_code == 202 or not expects_answer:
            return
        try:
            answer = msgspec.json.decode(response.content)
        except msgspec.DecodeError:
            answer = None
        if isinstance(answer, dict) and answer.get("jsonrpc") == "2.0" and ("result" in answer or "error" in answer):
            if answer.get("id") is None and id_ is not None:
                answer["id"] = id_
            if method == "initialize" and isinstance(answer.get("result"), dict):
                version = answer["result"].get("protocolVersion")
                self.protocol_version = version if isinstance(version, str) else None
            await self.write(answer)
            return
        # An HTTP-level refusal (problem+json) or an unexpected body.
        problem = answer if isinstance(answer, dict) else None
        what = f"{problem.get('code')}: {problem.get('detail')}" if problem else response.reason_phrase
        code = INVALID_REQUEST if 400 <= response.status_code < 500 else INTERNAL_ERROR
        await self.error(id_, code, f"the registry answered HTTP {response.status_code} ({what})", problem)


def _read_line(stream: BinaryIO) -> bytes | None:
    """The next line (None at end of input); an over-long line is skipped whole and read as b"\\0"."""
    line = stream.readline(MAX_LINE_BYTES + 1)
    if not line:
        return None
    if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
        while (rest := stream.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
            pass
        return b"\0"
    return line


async def run_bridge(
    url: str, token: str | None, *, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None
) -> int:
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout.buffer
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_SECONDS) as client:
        bridge = Bridge(url, token, stdout, client)
        pending: set[asyncio.Task] = set()
        while (line := await asyncio.to_thread(_read_line, stdin)) is not None:
            if line == b"\0":
                await bridge.error(None, INVALID_REQUEST, f"message longer than {MAX_LINE_BYTES} bytes")
                continue
            line = line.strip()
            if not line:
                continue
            try:
                message = msgspec.json.decode(line)
            except (msgspec.DecodeError, RecursionError):
                message = None  # the registry answers the parse error itself
            if isinstance(message, dict) and message.get("method") == "initialize":
                # The handshake finishes before later requests go out with its protocol version.
                await bridge.forward(line, message)
                continue
            task = asyncio.create_task(bridge.forward(line, message))
            pending.add(task)
            task.add_done_callback(pending.discard)
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
    return 0
