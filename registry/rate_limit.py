"""Per-client rate limiting (429 `rate_limited` with `Retry-After`): a token bucket per bearer token,
or per client address for anonymous callers, in this process.

Off unless CAPREG_RATE_LIMIT is set. Buckets are per process: with N workers or replicas a client
may get up to N times the rate; an edge proxy is the place for a global limit.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import msgspec
from litestar.types import ASGIApp, Receive, Scope, Send

from registry.problems import PROBLEM_MEDIA_TYPE, Problem
from registry.tracing import new_trace_id

# Probes and scrapes must keep working for whoever is being limited.
_EXEMPT = frozenset({"/healthz", "/readyz", "/metrics"})
_MAX_BUCKETS = 100_000


class TokenBuckets:
    """`rate` requests per second per key, bursts up to `burst`. Pure apart from the clock it is given."""

    def __init__(self, rate: float, burst: int):
        self.rate, self.burst = rate, burst
        self._buckets: dict[bytes, tuple[float, float]] = {}  # key -> (tokens, at)

    def take(self, key: bytes, now: float) -> float:
        """0 when a request may pass (and takes a token), else the seconds until one may."""
        tokens, at = self._buckets.get(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.rate)
        if tokens >= 1:
            if len(self._buckets) >= _MAX_BUCKETS and key not in self._buckets:
                self._buckets.clear()  # a flood of new keys: forget old buckets rather than grow without bound
            self._buckets[key] = (tokens - 1, now)
            return 0.0
        self._buckets[key] = (tokens, now)
        return (1 - tokens) / self.rate


def _client_key(scope: Scope) -> bytes:
    for name, value in scope["headers"]:
        if name == b"authorization":
            return value
    client = scope.get("client")
    return (client[0] if client else "unknown").encode()


def rate_limit_middleware(buckets: TokenBuckets, clock: Callable[[], float] = time.monotonic) -> Callable[[ASGIApp], ASGIApp]:
    def wrap(app: ASGIApp) -> ASGIApp:
        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http" or scope["path"] in _EXEMPT:
                await app(scope, receive, send)
                return
            wait = buckets.take(_client_key(scope), clock())
            if not wait:
                await app(scope, receive, send)
                return
            trace_id = scope.get("state", {}).get("trace_id") or new_trace_id()
            retry_after = str(max(1, math.ceil(wait)))
            body = msgspec.json.encode(Problem(
                type="https://capreg.dev/problems/rate_limited", title="Too Many Requests", status=429,
                detail=f"too many requests from this client; retry after {retry_after} s",
                code="rate_limited", trace_id=trace_id,
            ))
            await send({"type": "http.response.start", "status": 429, "headers": [
                (b"content-type", PROBLEM_MEDIA_TYPE.encode()), (b"retry-after", retry_after.encode()),
                (b"content-length", str(len(body)).encode()),
            ]})
            await send({"type": "http.response.body", "body": body})

        return middleware

    return wrap
