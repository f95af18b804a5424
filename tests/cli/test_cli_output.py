"""The CLI's output in pipes and on terminals (issue 37): a reader that goes away after one line
(`capreg ... | head -1`) ends the command quietly; piped output is plain rows with every id whole; a
narrow terminal never cuts an id; progress is for terminals only."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import subprocess
import sys

import httpx

from tests.conftest import EXAMPLES, ROOT, capreg, scratch_database


def _first_line_then_close(env: dict, *args: str) -> tuple[bytes, int, str]:
    """Run `capreg ARGS` with stdout a pipe that is closed after its first line is read, as
    `capreg ARGS | head -1` does; (that line, exit status, stderr)."""
    read, write = os.pipe()
    # A one-page pipe: the command blocks on it long before its output ends, whatever the
    # machine's default pipe size, so the reader is gone while it still writes.
    with contextlib.suppress(AttributeError, OSError):
        fcntl.fcntl(read, fcntl.F_SETPIPE_SZ, 4096)
    process = subprocess.Popen(
        [sys.executable, "-m", "registry.cli", *args],
        env=env,
        cwd=ROOT,
        stdout=write,
        stderr=subprocess.PIPE,
    )
    os.close(write)
    line = b""
    while not line.endswith(b"\n"):
        byte = os.read(read, 1)
        if not byte:
            break
        line += byte
    os.close(read)
    _, stderr = process.communicate(timeout=120)
    return line, process.returncode, stderr.decode(errors="replace")


def _quiet_end(returncode: int, stderr: str) -> None:
    assert returncode in (0, 141), (returncode, stderr)
    assert stderr == "", stderr


def test_a_file_output_into_a_closed_pipe_ends_quietly():
    """`capreg openapi --output /dev/stdout | head -1`: the document is far more than a pipe holds."""
    line, returncode, stderr = _first_line_then_close(dict(os.environ), "openapi", "--output", "/dev/stdout")
    assert line == b"{\n"
    _quiet_end(returncode, stderr)


def _many_capabilities(live_server, mint, tenant: str, agents: int = 40) -> dict:
    base, env, _ = live_server
    publisher = mint(tenant, "publisher", "registry:publish")
    body = (EXAMPLES / "billing-agent.json").read_bytes()
    with httpx.Client(base_url=base, timeout=60) as client:
        for number in range(agents):
            response = client.put(
                f"/v1/agents/{tenant}/billing-agent-{number:03}",
                content=body,
                headers={**publisher, "Content-Type": "application/json"},
            )
            assert response.status_code == 201, response.text
    token = mint(tenant, "router", "registry:read invoice:read", regions=["eu"])["Authorization"].split()[1]
    return {**env, "CAPREG_URL": base, "CAPREG_TOKEN": token}


def test_a_listing_into_a_closed_pipe_ends_quietly(live_server, mint, tenant):
    """`capreg discover | head -1` over 80 capabilities, as plain rows and as NDJSON."""
    env = _many_capabilities(live_server, mint, tenant)
    line, returncode, stderr = _first_line_then_close(env, "discover", "--tenant", tenant)
    assert line.startswith(b"REF\t")
    _quiet_end(returncode, stderr)
    line, returncode, stderr = _first_line_then_close(env, "discover", "--tenant", tenant, "--ndjson")
    assert line.startswith(b"{")
    _quiet_end(returncode, stderr)


async def test_audit_verify_on_a_fresh_install_says_there_is_nothing_to_verify(server_url, tmp_path):
    async with scratch_database(server_url, "fresh") as url:  # never migrated: a fresh install
        env = {**os.environ, "DATABASE_URL": url, "CAPREG_HOME": str(tmp_path)}
        result = await asyncio.to_thread(capreg, env, "audit", "verify")
    [line] = result.stdout.splitlines()
    assert line.startswith("no events yet: nothing to verify") and "seq 0" not in line, line
    assert "; caveat: " in line and "--checkpoint FILE" in line, line
    assert result.stderr == ""  # not a terminal: no progress


def test_audit_verify_after_events_names_their_seqs_and_keeps_its_caveat(live_server, mint, tenant):
    _many_capabilities(live_server, mint, tenant, agents=1)
    _, env, _ = live_server
    result = capreg(env, "audit", "verify")
    [line] = result.stdout.splitlines()
    assert re.match(
        r"audit chain intact: \d+ events \(seq 1 to \d+(, \d+ seq numbers? left unused by rolled-back writes)?\) re-hashed",
        line,
    ), line
    assert "up to seq 0" not in line and "tenant chain" in line, line
    assert line.rsplit("; ", 1)[1].startswith("caveat: "), line
    assert result.stderr == ""  # not a terminal: no progress


LONG_REF = "acme-corporation-eu-west/billing-agent-of-the-finance-department/invoice.lookup@2.0.0"


def _rendered(rows, width: int) -> str:
    """What a terminal `width` columns wide shows of `rows` (rich, as on a real terminal)."""
    import io

    from rich.console import Console

    from registry.cli.remote import print_table

    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None)
    print_table(console, rows)
    return console.file.getvalue()


def test_a_narrow_terminal_shows_every_id_whole():
    from registry.cli.remote import Rows

    rows = Rows(
        "2 capabilities",
        ["ref", "side effect", "scopes", "regions", "status", "health", "name"],
        [
            [LONG_REF, "none", ["invoice:read"], "eu", "active", "healthy", "Invoice lookup"],
            ["a/b/c@1.0.0", "write", ["invoice:write"], "any", "active", "unknown", "Mark paid"],
        ],
    )
    for width in (20, 40, 80, 120):
        shown = _rendered(rows, width)
        assert LONG_REF in shown and "a/b/c@1.0.0" in shown and "…" not in shown, shown
        for word in ("invoice:read", "invoice:write", "healthy", "unknown", "Invoice", "lookup"):
            assert word in shown, (width, shown)  # no column squeezed to nothing
    narrow = _rendered(rows, 40)
    assert f"\nref: {LONG_REF}\n" in narrow and "\nside effect: none\n" in narrow  # key: value blocks
    wide = _rendered(rows, 250)
    assert "┃ ref" in wide and LONG_REF in wide  # a table where it fits


def test_piped_rows_and_a_narrow_terminal_keep_a_long_ref_whole(live_server, mint, tenant):
    from tests.cli.test_cli_http import _on_a_terminal

    base, env, _ = live_server
    agent = "billing-agent-of-the-finance-department-eu-west"
    response = httpx.put(
        f"{base}/v1/agents/{tenant}/{agent}",
        content=(EXAMPLES / "billing-agent.json").read_bytes(),
        headers={**mint(tenant, "publisher", "registry:publish"), "Content-Type": "application/json"},
        timeout=60,
    )
    assert response.status_code == 201, response.text
    token = mint(tenant, "router", "registry:read invoice:read", regions=["eu"])["Authorization"].split()[1]
    router = {**env, "CAPREG_URL": base, "CAPREG_TOKEN": token}
    ref = f"{tenant}/{agent}/invoice.lookup@2.0.0"
    piped = capreg(router, "discover", "--tenant", tenant).stdout.splitlines()
    assert ref in [line.split("\t")[0] for line in piped[1:]]
    for columns in (40, 80):
        shown = _on_a_terminal(router, "discover", "--tenant", tenant, columns=columns)
        assert ref in shown and "…" not in shown, shown
    detail = _on_a_terminal(router, "detail", ref, columns=40)
    assert ref in detail and "…" not in detail, detail
