"""The access log (registry.web.observability.AccessLog): one JSON line per request on the
`capreg.access` logger, carrying the trace id the response's X-Trace-Id header carries, and neither
the Authorization header nor any query value (docs/operations.md#access-log)."""

from __future__ import annotations

import logging
from datetime import datetime
from urllib.parse import parse_qsl

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from registry.web.observability import ACCESS_LOGGER, AccessLog, _query_names


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def access_lines():
    handler = Lines()
    logger = logging.getLogger(ACCESS_LOGGER)
    logger.addHandler(handler)
    yield handler.lines
    logger.removeHandler(handler)


async def test_one_line_per_request_with_the_response_trace_id(client, mint, tenant, access_lines):
    headers = mint(tenant, "reader", "registry:read")
    token = headers["Authorization"].split()[1]
    secret_value = "s3cr3t-" + tenant
    responses = [
        await client.get("/v1/capabilities", params={"tenant": secret_value}, headers=headers),
        await client.get("/v1/capabilities", params={"tenant": tenant}, headers=headers),
        await client.get(
            f"/v1/agents/{tenant}/no-such-agent",
            headers={"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
        ),
        await client.get("/healthz", params={"api_key": secret_value}),
    ]
    assert len(access_lines) == len(responses)
    for raw, response in zip(access_lines, responses, strict=True):
        line = msgspec.json.decode(raw)
        assert line["trace_id"] == response.headers["x-trace-id"]
        assert line["request_id"] == response.headers["x-request-id"]
        assert line["status"] == response.status_code
        assert line["method"] == "GET" and line["duration_ms"] >= 0 and line["time"].endswith("Z")
        assert token not in raw and secret_value not in raw and "Bearer" not in raw
    first, second, missing, refused = (msgspec.json.decode(raw) for raw in access_lines)
    assert first["route"] == "/v1/capabilities" and first["query"] == ["tenant"] and first["tenant"] == tenant
    assert second["tenant"] == tenant
    assert missing["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736" and missing["status"] == 404
    assert missing["route"].startswith("/v1/agents/{") and tenant not in missing["route"]  # the template
    assert "tenant" not in missing  # no caller: no tenant
    assert refused["status"] == 400 and refused["query"] == ["api_key"]


def test_off_writes_nothing(access_lines):
    AccessLog("off").emit({"type": "http", "method": "GET", "state": {}}, "/healthz", 200, 0.0, 0.001)  # type: ignore[arg-type]
    assert access_lines == []


def test_a_level_name_sets_the_lines_level(access_lines):
    log = AccessLog("warning")
    assert log.level == logging.WARNING


async def test_a_path_no_route_matches_is_logged_and_counted(client, access_lines):
    """Scanners and mistyped URLs reach no handler; a platform team still sees them (route
    `unmatched`, never the path asked for) and counts them in /metrics."""
    answer = await client.get(
        "/wp-admin/setup-config.php", headers={"traceparent": "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"}
    )
    assert answer.status_code == 404
    [line] = [msgspec.json.decode(raw) for raw in access_lines]
    assert line["status"] == 404 and line["route"] == "unmatched" and line["trace_id"] == "ab" * 16
    assert "wp-admin" not in str(line)
    assert answer.headers["x-trace-id"] == "ab" * 16 and line["request_id"] == answer.headers["x-request-id"]
    assert answer.headers["x-content-type-options"] == "nosniff"  # the browser headers, as every answer
    access_lines.clear()
    wrong_method = await client.patch("/healthz")
    assert wrong_method.status_code == 405
    [line] = [msgspec.json.decode(raw) for raw in access_lines]
    assert line["status"] == 405 and line["route"] == "unmatched" and "x-request-id" in wrong_method.headers
    metrics = (await client.get("/metrics")).text
    assert 'route="unmatched"' in metrics or 'path="unmatched"' in metrics, metrics[:2000]


async def test_with_only_the_default_handler_lines_reach_stdout_together(capsys):
    """Without a logging configuration, lines skip logging's per-record work and are written to
    stdout together: a full buffer at once, else within FLUSH_SECONDS (here: flushed by hand)."""
    logger = logging.getLogger(ACCESS_LOGGER)
    saved = logger.handlers[:]
    logger.handlers.clear()
    try:
        log = AccessLog("info")
        scope = {"type": "http", "method": "GET", "state": {"trace_id": "t" * 32}, "query_string": b"a=1"}
        log.emit(scope, "/healthz", 200, 0.0, 0.001)  # type: ignore[arg-type]
        log.emit(scope, "/readyz", 503, 0.0, 0.002)  # type: ignore[arg-type]
        assert capsys.readouterr().out == ""  # pending, a timer set
        log.flush()
        lines = [msgspec.json.decode(raw) for raw in capsys.readouterr().out.splitlines()]
        assert [(line["route"], line["status"], line["query"]) for line in lines] == [
            ("/healthz", 200, ["a"]),
            ("/readyz", 503, ["a"]),
        ]
        for _ in range(AccessLog.FLUSH_BYTES // 100 + 1):  # a full buffer is written at once
            log.emit(scope, "/healthz", 200, 0.0, 0.001)  # type: ignore[arg-type]
        assert capsys.readouterr().out.count("\n") > 0
    finally:
        log.flush()
        logger.handlers[:] = saved


@given(
    st.binary(max_size=80)
    | st.lists(st.sampled_from([b"a", b"b=1", b"%41", b"+x", b"=", b"&", b"%zz", b"\xe9"])).map(b"".join)
)
def test_query_names_are_what_parse_qsl_reads(raw):
    """The line's cheap parameter-name parse (measured: parse_qsl cost a line 2.4 µs) agrees with
    the standard library's on any query string."""
    expected = sorted({name for name, _ in parse_qsl(raw.decode("latin-1"), keep_blank_values=True)})
    assert _query_names(raw) == expected


@given(st.floats(min_value=0, max_value=4_102_444_800, allow_nan=False))
def test_the_line_time_is_datetimes_to_the_millisecond(wall):
    log = AccessLog("off")
    text = log._time(wall)
    assert text == log._time(wall)  # the second's text, cached, is the same
    shown = datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    assert shown <= wall + 1e-3 and wall - shown < 1e-3 + 1e-6  # truncated to the millisecond


def test_query_names_are_remembered_within_a_bound():
    log = AccessLog("off")
    for n in range(2000):
        assert log._names(f"p{n}=1&limit=5".encode()) == ["limit", f"p{n}"]
    assert len(log._names_seen) <= 512
    long = b"&".join(b"p%d=1" % n for n in range(100))  # over 256 bytes: parsed, never kept
    assert log._names(long) == sorted(f"p{n}" for n in range(100))
    assert long not in log._names_seen
