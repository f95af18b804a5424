"""The README's first steps work as pasted: its shell and Python blocks, extracted from README.md (so
the README cannot drift from what runs), run in order in one shell against a real `capreg serve` on
a fresh database, each block's answer checked. And right after start, `capreg audit verify` has a
signed checkpoint covering the first events, and says so in words.

The only change to the blocks is the port: `127.0.0.1:8080` becomes the test server's port. They run
in a scratch directory standing in for the checkout (its `tests/` and `examples/` linked), so files
the blocks write stay out of the repository.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.conftest import ROOT, capreg, scratch_checkout
from tests.docs_support import code_blocks, plain_comments, shown_outputs, unmatched_outputs

# The README sections whose blocks make up the walkthrough, in README order. (Set-up installs the
# package, which the test run already did; Performance runs the benchmark; the SQL needs a superuser
# and is run by tests/audit/test_audit_tamper.py.)
WALKTHROUGH_SECTIONS = (
    "Five-minute walkthrough",
    "Liveness and fleets",
    "A router's one call: offers",
    "Use it from Python",
    "Versions and lifecycle",
    "Detail release",
    "Delegation tickets",
    "Connect an MCP client",
    "Audit",
)
MARK = "@@@ README block "


def readme_blocks() -> list[tuple[str, str, str]]:
    """(section, language, text) of every sh and python block in the walkthrough sections."""
    return code_blocks(ROOT / "README.md", WALKTHROUGH_SECTIONS, ("sh", "python"))


def walkthrough_script(blocks: list[tuple[str, str, str]], port: int) -> str:
    """One bash script: each block in turn after a marker line; Python blocks fed to `python -`."""
    lines = []
    for number, (_, language, text) in enumerate(blocks):
        text = text.replace("127.0.0.1:8080", f"127.0.0.1:{port}")
        lines.append(f"echo '{MARK}{number}'")
        if language == "sh":
            lines.append(text)
        else:
            lines += ["python - <<'README_PYTHON_BLOCK'", text.rstrip("\n"), "README_PYTHON_BLOCK"]
        lines.append("echo")
    return "\n".join(lines) + "\n"


def split_output(stdout: str, count: int) -> list[str]:
    parts = re.split(rf"^{re.escape(MARK)}(\d+)$", stdout, flags=re.M)
    outputs = [""] * count
    for index in range(1, len(parts), 2):
        outputs[int(parts[index])] = parts[index + 1]
    return outputs


def json_lines(output: str) -> list:
    """Every line of a block's output that is a JSON document."""
    found = []
    for line in output.splitlines():
        line = line.strip()
        if line.startswith(("{", "[")):
            try:
                found.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return found


def test_readme_walkthrough_runs_as_pasted(fresh_server, tmp_path):
    base, env, home = fresh_server
    port = int(base.rsplit(":", 1)[1])
    blocks = readme_blocks()
    assert [section for section, _, _ in blocks][:1] == ["Five-minute walkthrough"] and len(blocks) >= 8
    # This interpreter's environment first, whatever the README's `export PATH` adds after it.
    shell_env = {**env, "PATH": f"{Path(sys.executable).parent}:{env['PATH']}"}
    shell_env.pop("CAPREG_URL", None)
    shell_env.pop("CAPREG_TOKEN", None)
    result = subprocess.run(
        ["bash", "-c", walkthrough_script(blocks, port)],
        cwd=scratch_checkout(tmp_path),
        env=shell_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    outputs = split_output(result.stdout, len(blocks))
    report = (
        "\n".join(f"--- block {i} ({blocks[i][0]}):\n{out}" for i, out in enumerate(outputs))
        + "\n--- stderr:\n"
        + result.stderr
    )
    assert result.returncode == 0, report
    assert "Traceback" not in result.stderr and "command not found" not in result.stderr, report

    # Every output the README shows is what its block printed.
    wrong = {
        f"block {i} ({blocks[i][0]})": missing
        for i, out in enumerate(outputs)
        if (
            missing := unmatched_outputs(
                shown_outputs(blocks[i][2].replace("127.0.0.1:8080", f"127.0.0.1:{port}")), out
            )
        )
    }
    assert not wrong, f"shown but not printed: {wrong}\n{report}"

    def output_of(marker: str) -> str:
        [index] = [i for i, (_, _, text) in enumerate(blocks) if marker in text]
        return outputs[index]

    # Walkthrough: 201 twice, discovery 200 with the capability, 304 on the same URL, two interfaces.
    walk = output_of("# 1. Mint a caller token")
    assert walk.count("HTTP 201") == 2, report
    [page] = [doc for doc in json_lines(walk) if isinstance(doc, dict) and "items" in doc and "nextCursor" in doc]
    assert [item["ref"] for item in page["items"]] == ["acme/billing-agent/invoice.lookup@2.0.0"], report
    assert "HTTP 304" in walk, report
    [card] = [doc for doc in json_lines(walk) if isinstance(doc, dict) and "supportedInterfaces" in doc]
    assert [i["protocolBinding"] for i in card["supportedInterfaces"]] == ["HTTP+JSON", "JSONRPC"]

    assert json_lines(output_of("/heartbeat"))[0]["health"] == "healthy", report
    assert "invoice_lookup user-19" in output_of("router.mint_ticket"), report

    [verdict] = json_lines(output_of("/v1/compatibility"))
    readme_says = re.search(r'"path": "([^"]+)", "kind": "required_added"', output_of_text(blocks, "/v1/compatibility"))
    assert verdict.get("compatible") is False and readme_says is not None, report
    assert [(e["path"], e["kind"]) for e in verdict["errors"]] == [(readme_says.group(1), "required_added")], report

    deprecated, retired, versions = json_lines(output_of("/deprecate"))
    assert deprecated["status"] == "deprecated" and retired["status"] == "retired", report
    assert versions["items"][0]["status"] == "retired", report

    detail = json_lines(output_of("extendedAgentCard"))
    assert detail[0]["inputSchema"]["required"] == ["invoiceId"], report
    assert any(doc.get("valid") is True for doc in detail), report
    [rpc] = [doc for doc in detail if doc.get("jsonrpc") == "2.0"]
    assert [skill["id"] for skill in rpc["result"]["skills"]] == ["invoice.lookup"], report

    # Tickets: the minted one, active; the re-delegated one; both revoked by the parent's jti.
    tickets = json_lines(output_of("MINTED=$(curl"))
    minted, introspected, child, revoked = tickets
    assert minted["depth"] == 0 and minted["ref"] == "acme/billing-agent/invoice.lookup@2.0.0", report
    assert introspected["active"] is True and introspected["sub"] == "user-19", report
    assert child["depth"] == 1 and child["ref"] == "acme/ledger-reader/ledger.read@1.0.0", report
    assert child["resources"] == ["invoice:inv-2026-091"] and child["scopes"] == ["invoice:read"], report
    assert revoked["jti"] == minted["jti"] and sorted(revoked["revoked"]) == sorted([minted["jti"], child["jti"]]), (
        report
    )

    assert "user-19 invoice:read" in output_of("def check_ticket"), report
    assert "acme/billing-agent/invoice.lookup@2.0.0 acme/billing-agent/invoice.lookup@2.0.0" in output_of(
        "streamable_http_client"
    ), report

    audit = output_of("capreg audit verify")
    assert "audit chain intact" in audit and re.search(r"signed checkpoints? for seq [0-9, ]+ verif", audit), report
    assert (home / "checkpoint.json").exists() and not list(tmp_path.glob("checkout/*.json")), report


def test_every_output_the_walkthrough_shows_is_compared():
    """An answer shown as a plain comment (`# {"a": ...}`, `print(x)  # 1`) would never be checked:
    the walkthrough shows outputs only as `# -> ` lines, and shows some in most blocks."""
    blocks = readme_blocks()
    for section, language, text in blocks:
        for line in plain_comments(text):
            assert not line[1:].strip().startswith(("{", "[")), (
                f"{section}: {line!r} shows an answer that is not compared"
            )
        for line in text.splitlines():
            if language == "python":
                assert not re.search(r"print\(.*\)\s+#", line), f"{section}: {line!r} shows an answer inline"
    assert sum(bool(shown_outputs(text)) for _, _, text in blocks) >= len(blocks) // 2


def output_of_text(blocks, marker: str) -> str:
    [text] = [text for _, _, text in blocks if marker in text]
    return text


def test_a_checkpoint_covers_the_first_events_right_after_start(fresh_server):
    """No waiting for the 5-minute interval: the first events are signed within seconds, and
    `capreg audit verify` says what that proves."""
    base, env, _ = fresh_server
    assert httpx.get(f"{base}/v1/audit/checkpoints/latest").json()["seq"] == 0
    token = capreg(
        env, "token", "mint", "--tenant", "acme", "--sub", "publisher", "--scope", "registry:publish"
    ).stdout.strip()
    card = json.loads((ROOT / "tests" / "examples" / "billing-agent.json").read_text())
    put = httpx.put(
        f"{base}/v1/agents/acme/billing-agent", json=card, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    assert put.status_code == 201, put.text
    deadline = time.monotonic() + 10
    while (seq := httpx.get(f"{base}/v1/audit/checkpoints/latest").json()["seq"]) == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert seq > 0, "no checkpoint signed the first events within 10 s"
    line = capreg(env, "audit", "verify").stdout.strip()
    assert line.startswith("audit chain intact") and "\n" not in line
    assert f"the signed checkpoint for seq {seq} verifies" in line and f"nothing up to seq {seq} was rewritten" in line
    assert "0, 0" not in line and os.path.exists(env["CAPREG_HOME"])
