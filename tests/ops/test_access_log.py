"""The access log (registry.web.observability.AccessLog): one JSON line per request on the
`capreg.access` logger, carrying the trace id the response's X-Trace-Id header carries, and neither
the Authorization header nor any query value (docs/operations.md#access-log)."""

from __future__ import annotations

import logging

import msgspec
import pytest

from registry.web.observability import ACCESS_LOGGER, AccessLog


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
