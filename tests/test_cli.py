"""The real thing: `capreg serve` as a process (embedded PostgreSQL unless DATABASE_URL), driven by
the CLI (`token mint`, `register`, `audit verify`, `openapi --check`) and plain HTTP."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import jwt
import pytest

EXAMPLES = Path(__file__).parent / "examples"
ROOT = Path(__file__).parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def capreg(env: dict, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "registry.cli", *args], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    if check and result.returncode != 0:
        raise AssertionError(f"capreg {' '.join(args)} failed: {result.stdout}\n{result.stderr}")
    return result


@pytest.fixture(scope="module")
def server(tmp_path_factory, database_url_for_processes):
    home = tmp_path_factory.mktemp("home")
    port = free_port()
    env = {**os.environ, "CAPREG_HOME": str(home), "CAPREG_PORT": str(port)}
    env.pop("DATABASE_URL", None)
    if database_url_for_processes:
        env["DATABASE_URL"] = database_url_for_processes
    log_path = home / "serve.log"
    log = log_path.open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "registry.cli", "serve"], env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if process.poll() is not None:
            raise AssertionError(f"capreg serve exited: {log_path.read_text()}")
        time.sleep(0.2)
    else:
        process.kill()
        raise AssertionError("capreg serve did not become ready")
    yield base, env, home
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    log.close()


@pytest.fixture(scope="module")
def database_url_for_processes() -> str | None:
    """Use DATABASE_URL's server when the suite runs against one; else the processes embed their own."""
    return os.environ.get("DATABASE_URL")


def test_mint_register_discover_verify(server):
    base, env, _ = server
    token = capreg(env, "token", "mint", "--tenant", "acme", "--sub", "ci", "--scope", "registry:publish registry:read").stdout.strip()
    assert token.count(".") == 2
    registered = capreg({**env, "CAPREG_URL": base, "CAPREG_TOKEN": token},
                        "register", str(EXAMPLES / "billing-agent.json"), "--tenant", "acme", "--agent-id", "billing-agent", check=False)
    assert registered.returncode == 0, registered.stdout + registered.stderr
    assert '"published"' in registered.stdout

    items = httpx.get(f"{base}/v1/capabilities", params={"tenant": "acme"}).json()["items"]
    assert "acme/billing-agent/invoice.lookup@2.0.0" in [i["ref"] for i in items]
    card = httpx.get(f"{base}/v1/agents/acme/billing-agent/.well-known/agent-card.json").json()
    assert card["supportedInterfaces"][0]["url"] == f"{base}/v1/agents/acme/billing-agent"

    jwks = httpx.get(f"{base}/.well-known/jwks.json").json()
    key = next(k for k in jwks["keys"] if k["kid"] == jwt.get_unverified_header(token)["kid"])
    assert jwt.decode(token, jwt.PyJWK(key).key, algorithms=["EdDSA"], audience="capreg")["tenant"] == "acme"

    verify = capreg(env, "audit", "verify")
    assert "intact" in verify.stdout


def test_expired_token_from_the_cli_is_refused(server):
    base, env, _ = server
    token = capreg(env, "token", "mint", "--tenant", "acme", "--sub", "ci", "--scope", "registry:read", "--ttl", "-60").stdout.strip()
    response = httpx.get(f"{base}/v1/capabilities", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 401 and response.json()["code"] == "invalid_token"


def test_register_reports_failure_with_exit_code(server, tmp_path):
    base, env, _ = server
    token = capreg(env, "token", "mint", "--tenant", "acme", "--sub", "ci", "--scope", "registry:publish").stdout.strip()
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x"}')
    result = capreg({**env, "CAPREG_URL": base, "CAPREG_TOKEN": token}, "register", str(bad), "--tenant", "acme", "--agent-id", "x", check=False)
    assert result.returncode == 1 and "invalid_request" in result.stdout


def test_metrics_and_schema_on_the_real_server(server):
    base, _, _ = server
    httpx.get(f"{base}/v1/capabilities")
    metrics = httpx.get(f"{base}/metrics").text
    assert "capreg_requests_total" in metrics and 'path="/v1/capabilities"' in metrics
    assert httpx.get(f"{base}/schema/openapi.json").json()["info"]["title"] == "capreg"


def test_openapi_check_detects_drift(tmp_path):
    env = dict(os.environ)
    stale = tmp_path / "openapi.json"
    stale.write_text("{}")
    assert capreg(env, "openapi", "--check", "--output", str(stale), check=False).returncode == 1
    assert capreg(env, "openapi", "--check").returncode == 0
