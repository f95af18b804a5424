"""The load generator: a separate process driving C keep-alive HTTP/1.1 connections for a fixed time.

Raw asyncio protocols with pre-encoded requests rather than httpx: a Python HTTP client costs far
more CPU per request than the server under test, and would measure itself. The process reports its
own CPU use so the report can show whether it, not the server, was the limit.

Input (stdin, JSON): {"host", "port", "connections", "duration", "warmup", "expect": [200, ...],
  "requests": [{"method", "path", "headers": {...}, "body": "..."}]   cycled round-robin, or
  "registration": {"seed", "count", "rounds": [first, last], "tokens": {tenant: token}}  one PUT per
  (round, agent index), each once, round by round (stops early when they run out)}
Output (stdout, JSON): counts, status histogram, latencies in microseconds, wall and CPU seconds.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
import time

# How many unexpected answers a run keeps, and how much of each.
UNEXPECTED_KEPT = 3
UNEXPECTED_BYTES = 2000


class Http1Connection(asyncio.Protocol):
    """One keep-alive connection; one request in flight at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future | None = None
        self.closed = asyncio.get_running_loop().create_future()
        self.last_error = b""  # the last 4xx/5xx answer whole, so a run can say what went wrong

    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("connection lost"))
        if not self.closed.done():
            self.closed.set_result(None)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.waiter is None or self.waiter.done():
            return
        parsed = _parse_response(self.buffer)
        if parsed is not None:
            status, consumed, close = parsed
            if status >= 400:
                self.last_error = bytes(self.buffer[:consumed])
            del self.buffer[:consumed]
            self.waiter.set_result((status, close))

    async def request(self, raw: bytes) -> tuple[int, bool]:
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(raw)
        return await self.waiter


def _parse_response(buffer: bytearray) -> tuple[int, int, bool] | None:
    """(status, bytes consumed, server closes) once a whole response is buffered, else None."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = bytes(buffer[:end]).lower()
    status = int(head[9:12])
    start = end + 4
    close = b"\r\nconnection: close" in head
    if b"\r\ntransfer-encoding: chunked" in head:
        pos = start
        while True:
            line_end = buffer.find(b"\r\n", pos)
            if line_end < 0:
                return None
            size = int(bytes(buffer[pos:line_end]).split(b";")[0], 16)
            if len(buffer) < line_end + 2 + size + 2:
                return None
            pos = line_end + 2 + size + 2
            if size == 0:
                return status, pos, close
    marker = head.find(b"\r\ncontent-length:")
    length = 0
    if marker >= 0:
        value_end = head.find(b"\r\n", marker + 2)
        length = int(head[marker + 17 : value_end if value_end >= 0 else None].strip())
    if status in (204, 304) or 100 <= status < 200:
        length = 0
    if len(buffer) < start + length:
        return None
    return status, start + length, close


def encode_request(host: str, method: str, path: str, headers: dict[str, str], body: bytes | str | None) -> bytes:
    if isinstance(body, str):
        body = body.encode()
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", "Connection: keep-alive"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


def _request_source(job: dict):
    """A callable returning the next raw request, or None when a finite source is exhausted."""
    host = f"{job['host']}:{job['port']}"
    if "registration" in job:
        import msgspec

        from bench.data import agent

        spec = job["registration"]
        first, last = spec["rounds"]
        pairs = ((r, i) for r in range(first, last + 1) for i in range(spec["count"]))

        def next_registration() -> bytes | None:
            pair = next(pairs, None)
            if pair is None:
                return None
            a = agent(spec["seed"], pair[1], pair[0])
            headers = {"Authorization": f"Bearer {spec['tokens'][a.tenant]}", "Content-Type": "application/json"}
            return encode_request(
                host, "PUT", f"/v1/agents/{a.tenant}/{a.agent_id}", headers, msgspec.json.encode(a.card)
            )

        return next_registration
    raws = [encode_request(host, r["method"], r["path"], r.get("headers", {}), r.get("body")) for r in job["requests"]]
    if job.get("once"):  # each request sent once, then done
        each = iter(raws)
        return lambda: next(each, None)
    cycle = itertools.cycle(raws)
    return lambda: next(cycle)


async def run(job: dict) -> dict:
    loop = asyncio.get_running_loop()
    next_request = _request_source(job)
    expect = set(job.get("expect", [200]))
    duration, warmup = float(job["duration"]), float(job.get("warmup", 0.0))
    latencies: list[int] = []
    statuses: dict[int, int] = {}
    errors = 0
    unexpected: list[str] = []  # the first few unexpected answers, head and body (bounded)
    started = time.perf_counter()
    measure_from = started + warmup
    deadline = measure_from + duration
    first = last = None

    async def client() -> None:
        nonlocal errors, first, last
        conn: Http1Connection | None = None
        while True:
            now = time.perf_counter()
            if now >= deadline:
                break
            raw = next_request()
            if raw is None:
                break
            if conn is None or conn.closed.done():
                _, conn = await loop.create_connection(Http1Connection, job["host"], job["port"])
            t0 = time.perf_counter()
            try:
                status, close = await conn.request(raw)
            except (ConnectionError, OSError):
                errors += 1
                conn = None
                continue
            t1 = time.perf_counter()
            if close:
                conn.transport.close()
                conn = None
            if t0 >= measure_from:
                first = t0 if first is None else min(first, t0)
                last = t1 if last is None else max(last, t1)
                latencies.append(int((t1 - t0) * 1e6))
                statuses[status] = statuses.get(status, 0) + 1
                if status not in expect:
                    errors += 1
                    if len(unexpected) < UNEXPECTED_KEPT and status >= 400:
                        unexpected.append(conn.last_error[:UNEXPECTED_BYTES].decode(errors="replace"))
        if conn is not None and conn.transport is not None:
            conn.transport.close()

    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(client() for _ in range(int(job["connections"]))))
    cpu1, wall1 = time.process_time(), time.perf_counter()
    measured = (last - first) if first is not None and last is not None and last > first else 0.0
    return {
        "requests": len(latencies),
        "errors": errors,
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "seconds": measured,
        "latencies_us": latencies,
        "unexpected": unexpected,
        "cpu_seconds": cpu1 - cpu0,
        "wall_seconds": wall1 - wall0,
    }


def main() -> None:
    job = json.loads(sys.stdin.read())
    try:
        import uvloop  # optional: faster loop when installed

        uvloop.install()
    except ImportError:
        pass
    result = asyncio.run(run(job))
    write_report(result, sys.stdout)


def write_report(result: dict, stream) -> None:
    """The whole report, whatever the loop left: uvloop leaves stdout non-blocking, and a report
    larger than the pipe's buffer (64 KiB) was cut by EAGAIN. Blocking again, it is written whole."""
    os.set_blocking(stream.fileno(), True)
    stream.write(json.dumps(result))
    stream.flush()


if __name__ == "__main__":
    main()
