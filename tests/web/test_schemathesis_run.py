"""CI's schemathesis run: every check (`[checks] enabled = true` in tests/schemathesis.toml, which also
says what is switched off for which operations and why) against a real `capreg serve`, with a token
holding every scope, bounded in examples and time (about two minutes on two cores). Zero failures."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT, capreg

pytestmark = pytest.mark.slow


@pytest.mark.timeout(300)
def test_schemathesis_finds_nothing(live_server, tmp_path):
    base, env, _ = live_server
    scopes = "registry:read registry:publish registry:admin audit:read invoice:read"
    token = capreg(
        env, "token", "mint", "--tenant", "schemathesis", "--sub", "fuzzer", "--scope", scopes, "--regions", "eu,us"
    ).stdout.strip()
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "--config-file",
        str(ROOT / "tests" / "schemathesis.toml"),
        "run",
        f"{base}/schema/openapi.json",  # the served document (the committed one, tests/web/test_openapi_served.py)
        "--url",
        base,
        "--header",
        f"Authorization: Bearer {token}",
        "--max-examples",
        "10",
        "--max-time",
        "120",
        "--workers",
        "2",
        "--generation-deterministic",
        # The coverage phase is left out: in schemathesis 4.32 it stops with an internal error
        # (hypothesis: "AST constructor recursion depth mismatch"), a tool bug, not a finding.
        "--phases",
        "examples,fuzzing,stateful",
        "--report",
        "junit",
        "--report-dir",
        str(tmp_path),
    ]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "failure" not in result.stdout.split("SUMMARY")[-1].lower(), result.stdout[
        -3000:
    ]
