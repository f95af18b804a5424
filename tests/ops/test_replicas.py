"""Three `capreg serve` on one PostgreSQL under a small fleet's load (bench/replicas.py): every
version stored once, no 5xx, discovery agreeing on every replica within 1 s, `capreg audit verify`
passing, and a gap-free change feed and audit chains; audited writes by 1 and by 8 tenants."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.slow
def test_three_replicas_keep_every_invariant(tmp_path):
    args = [
        sys.executable,
        "-m",
        "bench",
        "--replicas",
        "3",
        "--agents",
        "60",
        "--duration",
        "1",
        "--connections",
        "16",
        "--out",
        str(tmp_path),
    ]
    if os.environ.get("DATABASE_URL"):
        args += ["--database-url", os.environ["DATABASE_URL"]]
    run = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    [path] = list(tmp_path.glob("replicas-*.json"))
    report = json.loads(path.read_text())
    invariants = report["invariants"]
    for name in (
        "every_version_stored_once",
        "zero_5xx",
        "discovery_agrees_within_1s",
        "audit_verify_passes",
        "change_feed_gap_free",
        "audit_chain_gap_free",
    ):
        assert invariants[name] is True, (name, invariants)
    assert report["registration_storm"]["statuses"] == {"201": 60, "200": 120}
    assert invariants["live_instances"] == 60
    rates = report["audited_writes_per_second"]
    # By one tenant, then by every tenant with a public capability (up to 8; fewer at 60 agents).
    assert {"1 tenant, 1 replica", "1 tenant, 3 replicas"} < set(rates) and len(rates) == 4
    assert all(r["errors"] == 0 for r in rates.values())
