"""`capreg replay` and `Registry.replay` end to end: examples/invoice_agent.py as a real a2a-sdk server
process, a real `capreg serve`; v1.1 passes the gate, v1.2 ("also marks the invoice", every schema
unchanged) is stopped by it. And the runner's reading of A2A answers (registry.client.replay)."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
from a2a.helpers.proto_helpers import new_data_message
from a2a.types import StreamResponse, Task, TaskState, TaskStatus

from registry.client import Registry
from registry.client.replay import observed
from tests.conftest import ROOT, capreg, free_port

SKILL = "invoice.lookup"


def _token(mint, tenant, sub, scopes) -> str:
    return mint(tenant, sub, scopes)["Authorization"].removeprefix("Bearer ")


def _registration(version: str, url: str) -> dict:
    """The example's own registration body (examples/invoice_agent.py --registration VERSION)."""
    spec = importlib.util.spec_from_file_location("invoice_agent_example", ROOT / "examples" / "invoice_agent.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.registration(version, url=url)


def _start_agent(behaviour: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "AGENT_PORT": str(port), "INVOICE_AGENT_BEHAVIOUR": behaviour}
    process = subprocess.Popen(
        [sys.executable, "examples/invoice_agent.py"],
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
            raise AssertionError(f"the invoice agent exited: {process.stdout.read()}")
        try:
            if httpx.get(f"{url}/.well-known/agent-card.json", timeout=1).status_code == 200:
                return process, f"{url}/a2a"
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    process.kill()
    raise AssertionError("the invoice agent did not start")


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    process.stdout.close()


@pytest.fixture
def agents():
    started: list[subprocess.Popen] = []

    def start(behaviour: str) -> str:
        process, url = _start_agent(behaviour)
        started.append(process)
        return url

    yield start
    for process in started:
        _stop(process)


@pytest.mark.timeout(400)  # two agents, a server and four CLI processes: slow on a loaded machine
def test_the_gate_passes_v1_1_and_stops_v1_2(live_server, mint, tenant, agents):
    base = live_server[0]
    publish = {"Authorization": f"Bearer {_token(mint, tenant, 'publisher', 'registry:publish')}"}
    ci = _token(mint, tenant, "ci", "registry:attest registry:read invoice:read")
    env = {**os.environ, "CAPREG_URL": base, "CAPREG_TOKEN": ci}
    prefix = f"{tenant}/invoice-agent/{SKILL}"
    with httpx.Client(base_url=base, timeout=30) as http:

        def put(version: str) -> dict:
            response = http.put(
                f"/v1/agents/{tenant}/invoice-agent",
                json=_registration(version, "http://agent.test/a2a"),
                headers=publish,
            )
            assert response.status_code == 201, response.text
            return response.json()

        assert put("1.0.0")["published"] == [{"id": SKILL, "version": "1.0.0"}]
        assert put("1.1.0")["candidates"] == [{"id": SKILL, "version": "1.1.0", "baseline": "1.0.0", "fixtures": 2}]

        passed = capreg(
            env, "replay", f"{prefix}@1.1.0", "--instance-url", agents("1.1"), "--instance", "ci-1", check=False
        )
        assert passed.returncode == 0, passed.stdout + passed.stderr
        assert passed.stdout.startswith(f"passed: {prefix}@1.1.0 is active")
        latest = http.get("/v1/capabilities", params={"tenant": tenant}).json()["items"]
        assert [c["version"] for c in latest] == ["1.1.0"]

        assert put("1.2.0")["candidates"] == [{"id": SKILL, "version": "1.2.0", "baseline": "1.1.0", "fixtures": 2}]
        marking = agents("1.2")
        failed = capreg(env, "replay", f"{prefix}@1.2.0", "--instance-url", marking, check=False)
        assert failed.returncode == 1, failed.stdout + failed.stderr
        assert "open-invoice: side_effect: observed side effect write, at most none expected" in failed.stdout
        assert "unknown-invoice" not in failed.stdout  # its answer is unchanged: it passes
        latest = http.get("/v1/capabilities", params={"tenant": tenant}).json()["items"]
        assert [c["version"] for c in latest] == ["1.1.0"]

        # The same through the Python client, in one line of a publisher's CI.
        with Registry(base, token=ci) as registry:
            verdict = registry.replay(f"{prefix}@1.2.0", marking)
        assert not verdict.passed and [(e["fixture"], e["kind"]) for e in verdict.errors] == [
            ("open-invoice", "side_effect")
        ]

        history = http.get(
            f"/v1/agents/{tenant}/invoice-agent/skills/{SKILL}/versions/1.2.0/replays",
            headers={"Authorization": f"Bearer {ci}"},
        ).json()["items"]
        assert [h["verdict"] for h in history] == ["failed", "failed"] and {h["actor"] for h in history} == {"ci"}

        # Nothing answers at the URL: every fixture is unknown_commit and destructive, so it fails.
        unreachable = capreg(
            env, "replay", f"{prefix}@1.2.0", "--instance-url", f"http://127.0.0.1:{free_port()}/a2a", check=False
        )
        assert (
            unreachable.returncode == 1 and "outcome" not in unreachable.stdout and "side_effect" in unreachable.stdout
        )
        # Not a candidate: the registry's 409, one line, exit 1.
        done = capreg(env, "replay", f"{prefix}@1.1.0", "--instance-url", marking, check=False)
        assert done.returncode == 1 and "not_candidate" in done.stderr


def _task(state, *, metadata: dict | None = None, output=None) -> StreamResponse:
    message = new_data_message(output if output is not None else {})
    if metadata:
        message.metadata.update(metadata)
    return StreamResponse(task=Task(id="t", context_id="c", status=TaskStatus(state=state, message=message)))


def test_the_runner_reads_outcome_output_and_side_effect_from_the_answer():
    done = observed(
        "f",
        [_task(TaskState.TASK_STATE_COMPLETED, metadata={"capreg.sideEffect": "none"}, output={"n": 3, "xs": [1.5]})],
        5,
    )
    assert done == {
        "fixture": "f",
        "outcome": "ok",
        "sideEffect": "none",
        "durationMs": 5,
        "output": {"n": 3, "xs": [1.5]},
    }
    failed = observed("f", [_task(TaskState.TASK_STATE_FAILED, metadata={"capreg.errorCode": "business_rejected"})], 1)
    assert (failed["outcome"], failed["sideEffect"]) == ("business_rejected", "destructive")  # unreported: the worst
    silent = observed("f", [_task(TaskState.TASK_STATE_FAILED, metadata={"capreg.sideEffect": "sideways"})], 1)
    assert (silent["outcome"], silent["sideEffect"]) == ("unknown_commit", "destructive")
    odd = observed("f", [_task(TaskState.TASK_STATE_FAILED, metadata={"capreg.errorCode": "no spaces allowed"})], 1)
    assert odd["outcome"] == "unknown_commit"
    reply = new_data_message({"ok": True})
    reply.metadata.update({"capreg.sideEffect": "idempotent"})
    direct = observed("f", [StreamResponse(message=reply)], 2)
    assert (direct["outcome"], direct["sideEffect"], direct["output"]) == ("ok", "idempotent", {"ok": True})
