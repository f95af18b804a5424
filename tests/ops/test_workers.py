"""`capreg serve` with two workers (CAPREG_WORKERS) as a real process: one scrape of /metrics counts every worker."""

from __future__ import annotations

import os
import re
import shutil
import time

import httpx

from tests.conftest import server_home, start_server, stop_server


def _metric(text: str, pattern: str) -> float:
    return sum(float(m.group(1)) for m in re.finditer(pattern, text, re.MULTILINE))


def test_one_scrape_counts_the_requests_of_every_worker(database_url):
    home = server_home()
    process, base, _ = start_server(home, database_url, settings={"CAPREG_POOL_MIN": "2", "CAPREG_WORKERS": "2"})
    try:
        # A new connection per request, so that both workers answer some.
        with httpx.Client(base_url=base, timeout=5, limits=httpx.Limits(max_keepalive_connections=0)) as http:
            for _ in range(120):
                assert http.get("/healthz").status_code == 200
            deadline = time.monotonic() + 10
            while True:  # other workers' snapshots are at most a second old
                text = http.get("/metrics").text
                served = _metric(
                    text, r'^capreg_requests_total\{method="GET",path="/healthz",status_code="200"\} (\S+)$'
                )
                pools = _metric(text, r"^capreg_db_pool_size (\S+)$")
                if served >= 120 and pools >= 4:
                    break
                assert time.monotonic() < deadline, (
                    f"one scrape saw {served} of 120 requests and pools of {pools} connections"
                )
                time.sleep(0.3)
    finally:
        stop_server(process)
        shutil.rmtree(home, ignore_errors=True)


def test_serve_runs_one_worker_per_usable_core_unless_told(monkeypatch):
    import pytest

    from registry.config import WORKERS_MAX, default_workers, load_settings

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(3)))
    assert default_workers() == 3 == load_settings({}).workers
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))
    assert default_workers() == WORKERS_MAX
    assert load_settings({"CAPREG_WORKERS": "2"}).workers == 2
    with pytest.raises(SystemExit, match="CAPREG_WORKERS"):
        load_settings({"CAPREG_WORKERS": "0"})
