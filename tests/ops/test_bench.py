"""The benchmark works: its data set is deterministic and registers through the app, and
`python -m bench` runs end to end at a tiny size (so CI proves the script, not the numbers)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from bench import data

ROOT = Path(__file__).parents[2]


def test_the_data_set_is_a_function_of_the_seed():
    first, again, other = data.agents(7, 40), data.agents(7, 40), data.agents(8, 40)
    assert first == again and first != other
    assert data.agent(7, 3, round_=2).card["skills"][0]["version"].endswith(".2.0")
    visibility = [a.card["visibility"] for a in data.agents(7, 400)]
    assert 0.45 < visibility.count("public") / 400 < 0.75
    assert any(a.card["sharedWith"] for a in data.agents(7, 400))
    for spec in first:
        assert 3 <= len(spec.card["skills"]) <= 5
        for skill in spec.card["skills"]:
            assert 3 <= len(skill["inputSchema"]["properties"]) <= 10
            assert skill["sideEffect"] in data.SIDE_EFFECTS


async def test_generated_cards_and_their_new_versions_register(client, mint, tenant):
    publisher = mint(tenant, "bench", "registry:publish")
    for index in range(12):
        card = data.agent(11, index).card
        agent_id = data.agent(11, index).agent_id
        created = await client.put(f"/v1/agents/{tenant}/{agent_id}", json=card, headers=publisher)
        assert created.status_code == 201, created.text
        newer = await client.put(
            f"/v1/agents/{tenant}/{agent_id}", json=data.agent(11, index, round_=1).card, headers=publisher
        )
        assert newer.status_code == 201, newer.text
        assert len(newer.json()["published"]) == len(card["skills"])


def test_the_benchmark_runs_end_to_end_at_a_tiny_size(tmp_path):
    args = [
        sys.executable,
        "-m",
        "bench",
        "--agents",
        "20",
        "--duration",
        "0.5",
        "--connections",
        "8",
        "--out",
        str(tmp_path),
        "--rest-seconds",
        "1",
    ]
    if os.environ.get("DATABASE_URL"):
        args += ["--database-url", os.environ["DATABASE_URL"]]
    run = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    [path] = list(tmp_path.glob("*.json"))
    report = json.loads(path.read_text())
    results = {r["name"]: r for r in report["results"]}
    # The bench keeps the server's log when any answer was a 5xx: no scenario may cause one.
    server_log = tmp_path / "serve.log"
    assert not server_log.exists(), server_log.read_text()[-6000:]
    assert results["register_agents"]["requests"] == 20
    for name in (
        "baseline",
        "discovery",
        "filtered",
        "conditional",
        "agent_card",
        "agent_view",
        "heartbeat",
        "heartbeat_unknown",
        "reregister_unchanged",
        "register_versions",
    ):
        assert results[name]["requests"] > 0 and results[name]["errors"] == 0, results[name]
        assert results[name]["rss_mb"] > 0
    assert results["discovery"]["ratios"]["rps"] > 0
    for name in ("detail", "ticket_mint", "introspect"):  # a scenario that is "not available" is a failure
        assert results[name]["available"] is True, results[name]
        assert results[name]["requests"] > 0 and results[name]["errors"] == 0, results[name]
    assert results["instances_per_worker"]["rps"] == results["heartbeat"]["rps"] * 30
    assert "public first page (limit 50)" in report["explain"]
    assert "req/s" in run.stdout
    # Memory at rest: every process of the server's tree, with PSS no larger than RSS summed.
    rest = report["memory_at_rest"]
    assert rest["processes"] and all(x["rss_mb"] > 0 for x in rest["processes"]), rest
    assert 0 < rest["pss_mb"] <= rest["rss_mb"], rest


async def test_the_noisy_neighbours_requests_are_slow_but_allowed(client, mint, tenant):
    """bench/noisy_neighbour.py's costliest requests are accepted, or stopped only by the deadline on a
    busy machine (so the scenario measures work, never a refusal of their shape)."""
    from bench.noisy_neighbour import _skill, exponential_validation, slow_patterns

    publisher = mint(tenant, "noisy", "registry:publish registry:read")
    card = {
        "name": "Heavy",
        "description": "Slow schemas.",
        "version": "1.0.0",
        "skills": [_skill(exponential_validation(22))],
    }
    assert (await client.put(f"/v1/agents/{tenant}/heavy", json=card, headers=publisher)).status_code == 201
    validated = await client.post(
        f"/v1/agents/{tenant}/heavy/skills/heavy.skill/versions/1.0.0/validate",
        json={"arguments": {"x": 5}, "mode": "strict"},
        headers=publisher,
    )
    assert validated.status_code == 200 and validated.json()["valid"] is False, validated.text
    compared = await client.post(
        "/v1/compatibility",
        headers=publisher,
        json={"old": _skill(slow_patterns(12)), "new": _skill(slow_patterns(13), "1.1.0")},
    )
    assert compared.status_code == 200 or "took more than" in compared.json()["detail"], compared.text


async def test_the_load_generator_keeps_an_unexpected_answer_to_show_it():
    """bench/load.py keeps the last 4xx/5xx answer of a connection whole (a run then prints what
    its errors were), and nothing of a 2xx."""
    from bench.load import Http1Connection

    conn = Http1Connection()
    ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"
    conn.waiter = asyncio.get_running_loop().create_future()
    conn.data_received(ok)
    assert await conn.waiter == (200, False) and conn.last_error == b""
    refused = b'HTTP/1.1 400 Bad Request\r\ncontent-length: 26\r\n\r\n{"code":"invalid_request"}'
    conn.waiter = asyncio.get_running_loop().create_future()
    conn.data_received(refused)
    assert await conn.waiter == (400, False)
    assert conn.last_error.startswith(b"HTTP/1.1 400") and conn.last_error.endswith(b'{"code":"invalid_request"}')


def test_the_load_generators_report_is_whole_on_a_non_blocking_pipe():
    """uvloop leaves stdout non-blocking; a report past the pipe's 64 KiB buffer was cut (issue 38)."""
    import threading

    from bench.load import write_report

    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    received = bytearray()
    start_reading = threading.Event()

    def reader() -> None:
        start_reading.wait()
        while chunk := os.read(read_end, 65536):
            received.extend(chunk)

    thread = threading.Thread(target=reader)
    thread.start()
    report = {"latencies_us": list(range(100_000))}  # about 600 KB of JSON
    timer = threading.Timer(0.2, start_reading.set)  # the reader starts late: the pipe fills first
    timer.start()
    with os.fdopen(write_end, "w") as stream:
        write_report(report, stream)
    thread.join()
    os.close(read_end)
    assert json.loads(received) == report
