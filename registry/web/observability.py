"""Per-request observability: the trace id every response and audit event carries, and the request
metrics served at /metrics (Prometheus text, through prometheus_client's exposition).

One plain ASGI middleware does both: it sits on every hot path, and litestar's own Prometheus
middleware cost about half of a trivial endpoint's throughput when measured (docs/performance.md).

With several workers (`capreg serve --workers N`), each worker keeps counting in its own memory and
writes a snapshot of its series to a directory the workers share (CAPREG_METRICS_DIR, set by
`capreg serve`) every second and whenever it answers a scrape; a scrape sums every worker's latest
snapshot, so one scrape counts every worker's requests (the other workers' as of at most a second
ago). Counters of a worker that exited stay counted, as in prometheus_client's multiprocess mode;
its gauges are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from registry.core.tracing import new_request_id, new_trace_id, set_request_id, trace_id_from

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class RequestMetrics:
    """Request counts and latency histograms by method, route template and status."""

    def __init__(self, shared_dir: str | Path | None = None) -> None:
        # (method, path template, status) -> [count, seconds sum, per-bucket counts]
        self._series: dict[tuple[str, str, str], list] = {}
        self.gauges: list[tuple[str, str, Callable[[], float]]] = []
        # Requests refused for want of a valid caller token, by reason (registry.web.authentication).
        self.auth_failures: dict[str, int] = {}
        self.shared_dir = Path(shared_dir) if shared_dir else None
        self._snapshot_path = self.shared_dir / f"worker-{os.getpid()}.json" if self.shared_dir else None

    # -- sharing between workers

    def write_snapshot(self) -> None:
        if self._snapshot_path is None:
            return
        snapshot = {
            "pid": os.getpid(),
            "series": [[*key, count, total, buckets] for key, (count, total, buckets) in list(self._series.items())],
            "gauges": [[name, help_text, read()] for name, help_text, read in self.gauges],
            "auth_failures": dict(self.auth_failures),
        }
        partial = self._snapshot_path.with_suffix(".tmp")
        partial.write_bytes(msgspec.json.encode(snapshot))
        os.replace(partial, self._snapshot_path)  # readers never see half a file

    async def share(self, interval: float = 1.0) -> None:
        """Write this worker's snapshot every `interval` seconds until cancelled."""
        while True:
            with contextlib.suppress(OSError):
                self.write_snapshot()
            await asyncio.sleep(interval)

    def _merged(self) -> tuple[dict[tuple[str, str, str], list], dict[str, list], dict[str, int]]:
        """Every worker's series and auth failures summed, and gauges of live workers summed (connections, ...)."""
        if self.shared_dir is None:
            gauges: dict[str, list] = {name: [help_text, read()] for name, help_text, read in self.gauges}
            return self._series, gauges, dict(self.auth_failures)
        with contextlib.suppress(OSError):
            self.write_snapshot()
        series: dict[tuple[str, str, str], list] = {}
        gauges = {}
        failures: dict[str, int] = {}
        for path in self.shared_dir.glob("worker-*.json"):
            try:
                snapshot = msgspec.json.decode(path.read_bytes())
            except (OSError, msgspec.DecodeError):
                continue
            for method, route, status, count, total, buckets in snapshot["series"]:
                merged = series.setdefault((method, route, status), [0, 0.0, [0] * len(buckets)])
                merged[0] += count
                merged[1] += total
                merged[2] = [a + b for a, b in zip(merged[2], buckets, strict=False)]
            for reason, count in snapshot.get("auth_failures", {}).items():
                failures[reason] = failures.get(reason, 0) + count
            if _alive(snapshot["pid"]):
                for name, help_text, value in snapshot["gauges"]:
                    gauges.setdefault(name, [help_text, 0])[1] += value
        return series, gauges, failures

    def observe(self, method: str, path: str, status: int, seconds: float) -> None:
        key = (method, path, str(status))
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = [0, 0.0, [0] * (len(LATENCY_BUCKETS) + 1)]
        series[0] += 1
        series[1] += seconds
        series[2][bisect_left(LATENCY_BUCKETS, seconds)] += 1

    def collect(self) -> Iterator:
        labels = ["method", "path", "status_code"]
        requests = CounterMetricFamily("capreg_requests", "HTTP requests answered", labels=labels)
        durations = HistogramMetricFamily("capreg_request_duration_seconds", "HTTP request latency", labels=labels)
        series, gauges, failures_merged = self._merged()
        for key, (count, total, buckets) in list(series.items()):
            requests.add_metric(list(key), count)
            cumulative, running = [], 0
            for bound, hits in zip((*LATENCY_BUCKETS, float("inf")), buckets, strict=False):
                running += hits
                cumulative.append((str(bound) if bound != float("inf") else "+Inf", running))
            durations.add_metric(list(key), cumulative, total)
        yield requests
        yield durations
        failures = CounterMetricFamily(
            "capreg_auth_failures", "requests refused for want of a valid caller token (not audited)", labels=["reason"]
        )
        for reason, count in sorted(failures_merged.items()):
            failures.add_metric([reason], count)
        yield failures
        for name, (help_text, value) in gauges.items():
            yield GaugeMetricFamily(name, help_text, value=value)

    def registry(self) -> CollectorRegistry:
        collectors = CollectorRegistry(auto_describe=False)
        collectors.register(self)
        return collectors


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def observability_middleware(
    metrics: RequestMetrics,
    extra_headers: Callable[[str], list[tuple[bytes, bytes]]] | None = None,
    screen: Callable[[Scope], ASGIApp | None] | None = None,
) -> Callable[[ASGIApp], ASGIApp]:
    """The one outer request middleware (each ASGI layer costs every request a few microseconds):
    adopt the W3C traceparent's trace id (or make one), echo it as X-Trace-Id beside the server's
    X-Request-Id, add `extra_headers(path)` (the browser security headers) unless the response sets
    them itself, and time the request. `screen(scope)`, when given, is asked in the same pass before
    the app: None lets the request through, else the ASGI app it returns answers instead
    (registry.web.request_guard.screens: unstorable values, unknown query parameters)."""

    def wrap(app: ASGIApp) -> ASGIApp:
        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            started = time.perf_counter()
            traceparent = next((v for k, v in scope["headers"] if k == b"traceparent"), None)
            trace_id = (trace_id_from(traceparent.decode("latin-1")) if traceparent else None) or new_trace_id()
            request_id = new_request_id()
            state = scope.setdefault("state", {})
            state["trace_id"], state["request_id"] = trace_id, request_id
            set_request_id(request_id)
            status = 500

            async def send_with_trace(message: Message) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                    headers = list(message.get("headers") or [])
                    present = {name.lower() for name, _ in headers}
                    if b"x-trace-id" not in present:  # problem responses set it
                        headers.append((b"x-trace-id", trace_id.encode()))
                    headers.append((b"x-request-id", request_id.encode()))
                    if extra_headers is not None:
                        headers.extend(h for h in extra_headers(scope["path"]) if h[0] not in present)
                    message["headers"] = headers
                await send(message)

            try:
                answer = screen(scope) if screen is not None else None
                await (answer or app)(scope, receive, send_with_trace)
            finally:
                path = scope.get("path_template") or "unmatched"
                # An HTTP scope (checked above): mypy narrows the scope union only by comparing with the
                # ScopeType enum, which costs every request more than this str comparison.
                metrics.observe(scope["method"], path, status, time.perf_counter() - started)  # type: ignore[typeddict-item]

        return middleware

    return wrap
