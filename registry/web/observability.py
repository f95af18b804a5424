"""Per-request observability: the trace id every response and audit event carries, the request
metrics served at /metrics (Prometheus text, through prometheus_client's exposition) beside the
process's own counters, histograms and gauges (batch sizes, pool waits, cache hits: registered by
registry.app) and the database gauges (`DatabaseGauges`: read once per scrape at most every few
seconds), and the access log (`AccessLog`: one JSON line per request). docs/operations.md lists
every series.

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
import atexit
import contextlib
import logging
import os
import sys
import time
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from urllib.parse import unquote_plus

import msgspec
from litestar import Request, Response
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from db.histograms import Histogram
from db.metrics_gauges import DatabaseReadings
from registry.core.tracing import new_request_id, new_trace_id, set_request_id, trace_id_from

log = logging.getLogger("capreg")

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


# Seconds a database reading serves scrapes: scrapes every few seconds cost at most one query each.
DATABASE_GAUGES_MAX_AGE = 5.0


class DatabaseGauges:
    """Gauges of what the database holds (db.metrics_gauges), read when /metrics is scraped and at
    most once per DATABASE_GAUGES_MAX_AGE seconds, never per request. They describe the database, not
    a worker, so a scrape shows the answering worker's reading as it is (never a sum of workers').
    `index_seq` is this worker's search index position (registry.search.index_sync), compared with
    the change head read here."""

    def __init__(
        self,
        read: Callable[[], Awaitable[DatabaseReadings]],
        index_seq: Callable[[], int],
        monotonic: Callable[[], float],
    ) -> None:
        self._read = read
        self._index_seq = index_seq
        self._monotonic = monotonic
        self.readings: DatabaseReadings | None = None
        self._read_at = float("-inf")
        self.reads = 0  # queries run (tests: scrapes within the max age share one)

    async def refresh(self) -> None:
        age = self._monotonic() - self._read_at
        if self.readings is not None and 0 <= age < DATABASE_GAUGES_MAX_AGE:  # < 0: the clock was replaced
            return
        try:
            self.readings = await self._read()
        except Exception as exc:  # the scrape still answers, with the last reading (or none)
            log.warning("database gauges not read: %r", exc)
            return
        self.reads += 1
        self._read_at = self._monotonic()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        readings = self.readings
        if readings is None:
            return
        yield GaugeMetricFamily(
            "capreg_audit_queue_events",
            "audit events stored, not yet appended to their chains",
            value=readings.audit_queued,
        )
        yield GaugeMetricFamily(
            "capreg_audit_queue_oldest_seconds",
            "age of the oldest audit event waiting to be chained (0: none waits)",
            value=readings.audit_oldest_seconds,
        )
        yield GaugeMetricFamily("capreg_live_leases", "agent instances with a live lease", value=readings.live_leases)
        yield GaugeMetricFamily(
            "capreg_change_head_seq", "the change feed's head sequence number", value=readings.change_head
        )
        index_seq = self._index_seq()
        yield GaugeMetricFamily(
            "capreg_search_index_seq", "change sequence the answering worker's search index follows to", value=index_seq
        )
        yield GaugeMetricFamily(
            "capreg_search_index_lag",
            "changes the answering worker's search index is behind the change head",
            value=max(0, readings.change_head - index_seq),
        )


class RequestMetrics:
    """Request counts and latency histograms by method, route template and status."""

    def __init__(self, shared_dir: str | Path | None = None) -> None:
        # (method, path template, status) -> [count, seconds sum, per-bucket counts]
        self._series: dict[tuple[str, str, str], list] = {}
        self.gauges: list[tuple[str, str, Callable[[], float]]] = []
        # The process's own counters and histograms (name without _total, help, reading), summed over
        # every worker as the request series are; registered by registry.app.
        self.counters: list[tuple[str, str, Callable[[], float]]] = []
        self.histograms: list[tuple[str, str, Histogram]] = []
        self.database: DatabaseGauges | None = None
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
            "counters": [[name, help_text, read()] for name, help_text, read in self.counters],
            "histograms": [
                [name, help_text, list(h.bounds), list(h.counts), h.total] for name, help_text, h in self.histograms
            ],
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

    def _merged(self) -> Merged:
        """Every worker's series, auth failures, counters and histograms summed, and gauges of live
        workers summed (connections, ...)."""
        if self.shared_dir is None:
            return Merged(
                series=self._series,
                gauges={name: [help_text, read()] for name, help_text, read in self.gauges},
                failures=dict(self.auth_failures),
                counters={name: [help_text, read()] for name, help_text, read in self.counters},
                histograms={
                    name: [help_text, list(h.bounds), list(h.counts), h.total] for name, help_text, h in self.histograms
                },
            )
        with contextlib.suppress(OSError):
            self.write_snapshot()
        merged_all = Merged(series={}, gauges={}, failures={}, counters={}, histograms={})
        series, gauges, failures = merged_all.series, merged_all.gauges, merged_all.failures
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
            for name, help_text, value in snapshot.get("counters", []):
                merged_all.counters.setdefault(name, [help_text, 0])[1] += value
            for name, help_text, bounds, counts, total in snapshot.get("histograms", []):
                held = merged_all.histograms.setdefault(name, [help_text, bounds, [0] * len(counts), 0.0])
                held[2] = [a + b for a, b in zip(held[2], counts, strict=False)]
                held[3] += total
            if _alive(snapshot["pid"]):
                for name, help_text, value in snapshot["gauges"]:
                    gauges.setdefault(name, [help_text, 0])[1] += value
        return merged_all

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
        merged = self._merged()
        for key, (count, total, buckets) in list(merged.series.items()):
            requests.add_metric(list(key), count)
            durations.add_metric(list(key), _cumulative(LATENCY_BUCKETS, buckets), total)
        yield requests
        yield durations
        failures = CounterMetricFamily(
            "capreg_auth_failures", "requests refused for want of a valid caller token (not audited)", labels=["reason"]
        )
        for reason, count in sorted(merged.failures.items()):
            failures.add_metric([reason], count)
        yield failures
        for name, (help_text, value) in merged.gauges.items():
            yield GaugeMetricFamily(name, help_text, value=value)
        for name, (help_text, value) in merged.counters.items():
            yield CounterMetricFamily(name, help_text, value=value)
        for name, (help_text, bounds, counts, total) in merged.histograms.items():
            yield HistogramMetricFamily(name, help_text, buckets=_cumulative(tuple(bounds), counts), sum_value=total)
        if self.database is not None:
            yield from self.database.collect()

    def registry(self) -> CollectorRegistry:
        collectors = CollectorRegistry(auto_describe=False)
        collectors.register(self)
        return collectors


class Merged(msgspec.Struct):
    """What a scrape shows of every worker (RequestMetrics._merged)."""

    series: dict[tuple[str, str, str], list]
    gauges: dict[str, list]
    failures: dict[str, int]
    counters: dict[str, list]
    histograms: dict[str, list]


def _cumulative(bounds: tuple[float, ...], counts: list[int]) -> list[tuple[str, float]]:
    """Per-bucket counts as Prometheus' cumulative buckets, +Inf last."""
    cumulative: list[tuple[str, float]] = []
    running = 0
    for bound, hits in zip((*bounds, float("inf")), counts, strict=False):
        running += hits
        cumulative.append((str(bound) if bound != float("inf") else "+Inf", running))
    return cumulative


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


ACCESS_LOGGER = "capreg.access"
UNMATCHED = "unmatched"  # the route of a request no route matched (metrics and the access log)


class AccessLine(msgspec.Struct, omit_defaults=True):
    """One request in the access log. Never a header's value (the Authorization header least of all)
    nor a query value (a token or a secret could be one): the query's parameter names only."""

    time: str  # when the request began, RFC 3339 UTC with milliseconds
    method: str
    route: str  # the route template (`/v1/agents/{tenant:str}/{agent_id:str}`), "unmatched" when none
    status: int
    duration_ms: float
    trace_id: str
    request_id: str
    tenant: str | None = None  # the authenticated caller's tenant, when the request had one
    query: list[str] = []  # the query's parameter names, sorted, each once


def _query_names(raw: bytes) -> list[str]:
    """The parameter names of a query string, sorted, each once, as parse_qsl reads them (split on
    `&`, the name up to `=`, percent- and plus-decoded) at a fraction of its cost: only names with
    `%` or `+` are decoded (parse_qsl cost a line about 2.4 µs)."""
    names = set()
    for part in raw.split(b"&"):
        if part:
            name = part.split(b"=", 1)[0].decode("latin-1")
            names.add(unquote_plus(name) if "%" in name or "+" in name else name)
    return sorted(names)


class StdoutHandler(logging.StreamHandler):
    """Writes to whatever sys.stdout is when a line is written (a server's or a test's capture)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stdout
        super().emit(record)


class AccessLog:
    """The access log: one JSON line per request (AccessLine, msgspec-encoded) on the `capreg.access`
    logger at `level` ("off": none). When nothing configured that logger, it writes to stdout, so
    the log is on by default; an application's own logging configuration (handlers on the logger)
    takes precedence."""

    def __init__(self, level: str = "info") -> None:
        self.logger = logging.getLogger(ACCESS_LOGGER)
        self.level = logging.CRITICAL + 1 if level == "off" else logging.getLevelName(level.upper())
        self.enabled = level != "off"
        self._default: StdoutHandler | None = None
        if self.enabled and not self.logger.handlers:
            handler = StdoutHandler()
            handler.setFormatter(logging.Formatter("%(message)s"))
            self.logger.addHandler(handler)
            self.logger.propagate = False
            self.logger.setLevel(logging.DEBUG)  # the line's own level decides
            self._default = handler
        self._encoder = msgspec.json.Encoder()
        self._second = -1
        self._second_text = ""
        self._names_seen: dict[bytes, list[str]] = {}
        # While the default handler is the logger's only one, lines skip logging's per-record work
        # (a record, the handler's lock, a flush each: it halved cached reads' throughput, measured
        # in bench/) and are written to stdout together, at most FLUSH_SECONDS after they were made.
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._flush_scheduled = False
        atexit.register(self.flush)

    FLUSH_SECONDS = 0.2
    FLUSH_BYTES = 64 * 1024

    def flush(self) -> None:
        """Write the lines not written yet (the timer, a full buffer, the process's exit)."""
        self._flush_scheduled = False
        if not self._pending:
            return
        text = b"".join(self._pending).decode()
        self._pending.clear()
        self._pending_bytes = 0
        with contextlib.suppress(OSError, ValueError):  # a closed stdout loses the lines, not the request
            sys.stdout.write(text)
            sys.stdout.flush()

    def _write(self, line: bytes) -> None:
        self._pending.append(line + b"\n")
        self._pending_bytes += len(line) + 1
        if self._pending_bytes >= self.FLUSH_BYTES:
            self.flush()
        elif not self._flush_scheduled:
            try:
                asyncio.get_running_loop().call_later(self.FLUSH_SECONDS, self.flush)
                self._flush_scheduled = True
            except RuntimeError:  # no loop: write it now
                self.flush()

    def _time(self, wall: float) -> str:
        """`wall` as RFC 3339 UTC, to the millisecond (truncated); the part up to the second made
        once a second (datetime's isoformat cost a line about 1.6 µs)."""
        second, milli = divmod(int(wall * 1000), 1000)
        if second != self._second:
            self._second = second
            self._second_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return f"{self._second_text}.{milli:03d}Z"

    def _names(self, raw: bytes) -> list[str]:
        """The query's parameter names (_query_names), remembered for the last few hundred query
        strings up to 256 bytes (so the memory is bounded whatever callers send): a router asks the
        same ones again and again; any other string costs one parse."""
        if len(raw) > 256:
            return _query_names(raw)
        names = self._names_seen.get(raw)
        if names is None:
            if len(self._names_seen) >= 512:
                self._names_seen.clear()
            names = self._names_seen[raw] = _query_names(raw)
        return names

    def emit(self, scope: Scope, route: str, status: int, started_wall: float, seconds: float) -> None:
        if not self.enabled or not self.logger.isEnabledFor(self.level):
            return
        state = scope.get("state", {})
        caller = state.get("caller")
        tenant = getattr(caller, "tenant", None)  # a Caller; None or a refusal otherwise
        raw_query = scope.get("query_string", b"")
        line = AccessLine(
            time=self._time(started_wall),
            method=scope["method"],  # type: ignore[typeddict-item]
            route=route,
            status=status,
            duration_ms=round(seconds * 1000, 3),
            trace_id=state.get("trace_id", ""),
            request_id=state.get("request_id", ""),
            tenant=tenant if isinstance(tenant, str) else None,
            query=self._names(raw_query) if raw_query else [],
        )
        if self._default is not None and self.logger.handlers == [self._default]:
            self._write(self._encoder.encode(line))
        else:
            self.logger.log(self.level, self._encoder.encode(line).decode())


def observability_middleware(
    metrics: RequestMetrics,
    extra_headers: Callable[[str], list[tuple[bytes, bytes]]] | None = None,
    screen: Callable[[Scope], ASGIApp | None] | None = None,
    access_log: AccessLog | None = None,
) -> Callable[[ASGIApp], ASGIApp]:
    """The one outer request middleware (each ASGI layer costs every request a few microseconds):
    adopt the W3C traceparent's trace id (or make one), echo it as X-Trace-Id beside the server's
    X-Request-Id, add `extra_headers(path)` (the browser security headers) unless the response sets
    them itself, and time the request. `screen(scope)`, when given, is asked in the same pass before
    the app: None lets the request through, else the ASGI app it returns answers instead
    (registry.web.request_guard.screens: unstorable values, unknown query parameters). Every request
    ends with its line in `access_log`, whatever happened to it (in the `finally`)."""

    def wrap(app: ASGIApp) -> ASGIApp:
        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            started = time.perf_counter()
            started_wall = time.time()  # the access line's time: a measurement, not a rule's clock
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
                path = scope.get("path_template") or UNMATCHED
                # An HTTP scope (checked above): mypy narrows the scope union only by comparing with the
                # ScopeType enum, which costs every request more than this str comparison.
                seconds = time.perf_counter() - started
                metrics.observe(scope["method"], path, status, seconds)  # type: ignore[typeddict-item]
                if access_log is not None:
                    access_log.emit(scope, path, status, started_wall, seconds)

        return middleware

    return wrap


def unmatched_requests(
    handle: Callable[[Request, Exception], Response],
    metrics: RequestMetrics,
    extra_headers: Callable[[str], list[tuple[bytes, bytes]]] | None = None,
    access_log: AccessLog | None = None,
) -> Callable[[Request, Exception], Response]:
    """The app's exception handler `handle`, also seeing the requests no route matches: litestar
    applies middleware per route, so a scanner's or a mistyped path's 404 (and 405), raised by the
    router, never passes observability_middleware. Their answer gets the request id and the browser
    headers here; they are counted in /metrics and logged under the route `unmatched` (never the
    path asked for, which the caller chose), with the trace id their problem answer carries. Their
    duration is the answer's making: nothing ran before routing failed. Requests the middleware saw
    (a request id in the state) are left to it, and no other request pays anything: a `before_send`
    hook did this before, at about 3 µs on every request (bench/cpu_per_request.py)."""

    def handler(request: Request, exc: Exception) -> Response:
        started, started_wall = time.perf_counter(), time.time()
        response = handle(request, exc)
        scope = request.scope
        state = scope.setdefault("state", {})
        if "request_id" in state:  # the middleware's request
            return response
        request_id = new_request_id()
        state["request_id"] = request_id  # the problem answer set state["trace_id"] and X-Trace-Id
        present = {name.lower() for name in response.headers}
        response.headers["X-Request-Id"] = request_id
        if extra_headers is not None:
            for name, value in extra_headers(scope["path"]):
                if name.decode("latin-1") not in present:
                    response.headers[name.decode("latin-1")] = value.decode("latin-1")
        status = response.status_code or 500  # always set on a problem answer
        seconds = time.perf_counter() - started
        metrics.observe(scope["method"], UNMATCHED, status, seconds)
        if access_log is not None:
            access_log.emit(scope, UNMATCHED, status, started_wall, seconds)
        return response

    return handler
