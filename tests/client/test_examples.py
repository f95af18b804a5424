"""The examples run end to end: examples/billing_agent.py as a real a2a-sdk server process that
registers and keeps alive against a real `capreg serve`, and examples/router.py discovering it,
making an OpenAI tool of it, minting a ticket and calling it through the a2a-sdk client."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from registry.client import Registry
from tests.conftest import ROOT, free_port


def _token(mint, tenant, sub, scopes, regions=None) -> str:
    return mint(tenant, sub, scopes, regions=regions)["Authorization"].removeprefix("Bearer ")


@pytest.fixture
def billing_agent(live_server, mint, tenant):
    base = live_server[0]
    port = free_port()
    env = {
        **os.environ,
        "CAPREG_URL": base,
        "CAPREG_TENANT": tenant,
        "AGENT_PORT": str(port),
        "CAPREG_TOKEN": _token(mint, tenant, "billing-agent", "registry:publish"),
    }
    process = subprocess.Popen(
        [sys.executable, "examples/billing_agent.py"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the billing agent exited: {process.stdout.read()}")
        try:
            if httpx.get(f"{url}/.well-known/agent-card.json", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    yield url, process
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    process.stdout.close()


def test_router_calls_the_billing_agent_with_a_ticket(live_server, mint, tenant, billing_agent):
    base = live_server[0]
    url, agent = billing_agent
    with Registry(base) as anonymous:
        [cap] = list(anonymous.discover(tenant=tenant))
        assert (cap.id, cap.health) == ("invoice.lookup", "healthy")

    env = {
        **os.environ,
        "CAPREG_URL": base,
        "CAPREG_TENANT": tenant,
        "CAPREG_TOKEN": _token(mint, tenant, "router", "registry:read invoice:read"),
    }
    result = subprocess.run(
        [sys.executable, "examples/router.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    steps = {line["step"]: line["value"] for line in map(json.loads, result.stdout.splitlines())}
    [tool] = steps["tools"]
    assert tool["type"] == "function" and tool["function"]["name"] == "invoice_lookup"
    assert tool["function"]["parameters"]["required"] == ["invoiceId"]
    assert steps["call"]["ref"] == f"{tenant}/billing-agent-example/invoice.lookup@1.0.0"
    answer = steps["answer"]
    assert answer["invoice"]["status"] == "open" and answer["onBehalfOf"] == "user-19"
    assert answer["calledBy"] == f"{tenant}/router" and answer["ticket"] == steps["ticket"]["jti"]

    # Without a ticket, or with a caller token instead of one, the agent answers 401 and says why.
    message = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {}}
    bare = httpx.post(f"{url}/a2a", json=message)
    assert bare.status_code == 401 and bare.json()["reason"] == "missing"
    assert bare.headers["www-authenticate"].startswith("Bearer")
    wrong = httpx.post(f"{url}/a2a", json=message, headers={"Authorization": "Bearer " + env["CAPREG_TOKEN"]})
    assert (wrong.status_code, wrong.json()["code"], wrong.json()["reason"]) == (401, "invalid_ticket", "wrong_type")

    # Stopping the agent is clean: exit code 0 after SIGINT.
    agent.send_signal(signal.SIGINT)
    assert agent.wait(timeout=10) == 0
