"""The `capreg` commands for people that go through the HTTP API, run as processes against a real
`capreg serve`: tables by default, --json/--ndjson for machines, one-line errors."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys

from tests.conftest import EXAMPLES, ROOT, capreg, free_port


def _env(live_server, mint, tenant, sub, scopes, regions=None) -> dict:
    base, env, _ = live_server
    token = mint(tenant, sub, scopes, regions=regions)["Authorization"].removeprefix("Bearer ")
    return {**env, "CAPREG_URL": base, "CAPREG_TOKEN": token, "COLUMNS": "200"}


def test_register_discover_detail_and_tickets(live_server, mint, tenant):
    publisher = _env(live_server, mint, tenant, "publisher", "registry:publish")
    registered = capreg(
        publisher, "register", str(EXAMPLES / "billing-agent.json"), "--tenant", tenant, "--agent-id", "billing-agent"
    )
    assert registered.stdout.count("\n") == 1
    assert (
        f"{tenant}/billing-agent registered (201, something new): published invoice.lookup@2.0.0" in registered.stdout
    )

    router = _env(live_server, mint, tenant, "router", "registry:read invoice:read", regions=["eu"])
    table = capreg(router, "discover", "--tenant", tenant, "--tag", "finance")
    assert f"{tenant}/billing-agent/invoice.lookup@2.0.0" in table.stdout and table.stdout.startswith("REF\t")
    lines = capreg(router, "discover", "--tenant", tenant, "--side-effect-max", "none", "--ndjson").stdout.splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["invoice.lookup"]

    ref = f"{tenant}/billing-agent/invoice.lookup@^2"
    shown = capreg(router, "detail", ref)
    assert (
        "\ninputSchema\t{" in shown.stdout and "invoiceId" in shown.stdout and "billing.acme.internal" in shown.stdout
    )
    assert json.loads(capreg(router, "detail", ref, "--json").stdout)["inputSchema"]["required"] == ["invoiceId"]

    minted = json.loads(
        capreg(
            router,
            "ticket",
            "mint",
            ref,
            "--scope",
            "invoice:read",
            "--on-behalf-of",
            "user-19",
            "--resource",
            "invoice:inv-2026-091",
            "--json",
        ).stdout
    )
    assert minted["ref"].endswith("@2.0.0") and minted["resources"] == ["invoice:inv-2026-091"]
    introspect = subprocess.run(
        [sys.executable, "-m", "registry.cli", "ticket", "introspect", "-"],
        input=minted["ticket"],
        env=router,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert introspect.returncode == 0 and "user-19" in introspect.stdout
    revoked = capreg(router, "ticket", "revoke", minted["jti"])
    assert minted["jti"] in revoked.stdout
    inactive = subprocess.run(
        [sys.executable, "-m", "registry.cli", "ticket", "introspect", "-", "--json"],
        input=minted["ticket"],
        env=router,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert inactive.returncode == 1 and json.loads(inactive.stdout)["active"] is False

    auditor = _env(live_server, mint, tenant, "auditor", "audit:read")
    grants = capreg(auditor, "audit", "grants", "--inactive")
    assert minted["jti"] in grants.stdout and grants.stdout.startswith("JTI\tACTOR\t")
    events = [json.loads(line) for line in capreg(auditor, "audit", "events", "--ndjson").stdout.splitlines()]
    assert {"agent.registered", "ticket.granted", "ticket.revoked"} <= {e["type"] for e in events}
    shown = capreg(auditor, "audit", "events", "--type", "ticket.revoked")
    assert "ticket.revoked" in shown.stdout and f"{tenant}/router" in shown.stdout


def test_errors_are_one_line_and_a_non_zero_exit(live_server, mint, tenant):
    router = _env(live_server, mint, tenant, "router", "registry:read")
    missing = capreg(router, "detail", f"{tenant}/nobody/no.skill@1.0.0", check=False)
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1
    assert "404 not_found" in missing.stderr and "Traceback" not in missing.stderr
    denied = capreg(router, "ticket", "mint", f"{tenant}/nobody/no.skill", "--scope", "x:y", check=False)
    assert denied.returncode == 1 and "not_found" in denied.stderr
    bad_ref = capreg(router, "detail", "nonsense", check=False)
    assert bad_ref.returncode == 2 and "is not a capability ref" in bad_ref.stderr
    no_token = capreg({**router, "CAPREG_TOKEN": ""}, "audit", "events", check=False)
    assert no_token.returncode == 1 and "CAPREG_TOKEN is not set" in no_token.stderr
    down = capreg({**router, "CAPREG_URL": f"http://127.0.0.1:{free_port()}"}, "discover", check=False)
    assert down.returncode == 2 and "cannot reach capreg at" in down.stderr and "Traceback" not in down.stderr


def _on_a_terminal(env: dict, *args: str, columns: int = 80) -> str:
    """What a person sees: the command's stdout on a pseudo-terminal `columns` wide."""
    primary, secondary = pty.openpty()
    try:
        subprocess.run(
            [sys.executable, "-m", "registry.cli", *args],
            env={**env, "COLUMNS": str(columns)},
            cwd=ROOT,
            stdout=secondary,
            stderr=subprocess.DEVNULL,
            timeout=120,
            check=True,
        )
    finally:
        os.close(secondary)
    chunks = []
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(primary)
    return b"".join(chunks).decode(errors="replace")


def test_piped_output_is_plain_rows_and_a_terminal_gets_unbroken_refs(live_server, mint, tenant):
    publisher = _env(live_server, mint, tenant, "publisher", "registry:publish")
    capreg(
        publisher, "register", str(EXAMPLES / "billing-agent.json"), "--tenant", tenant, "--agent-id", "billing-agent"
    )
    again = capreg(
        publisher,
        "register",
        str(EXAMPLES / "billing-agent.json"),
        "--tenant",
        tenant,
        "--agent-id",
        "billing-agent",
        "--json",
    )
    assert json.loads(again.stdout)["unchanged"] and not json.loads(again.stdout)["published"]
    router = {
        **_env(live_server, mint, tenant, "router", "registry:read invoice:read", regions=["eu"]),
        "COLUMNS": "80",
    }
    piped = capreg(router, "discover", "--tenant", tenant).stdout.splitlines()
    header, *rows = piped
    assert header.split("\t") == ["REF", "SIDE_EFFECT", "SCOPES", "REGIONS", "STATUS", "HEALTH", "NAME"]
    assert sorted(row.split("\t")[0] for row in rows) == [
        f"{tenant}/billing-agent/invoice.lookup@2.0.0",
        f"{tenant}/billing-agent/invoice.mark-paid@1.1.0",
    ]
    assert all(len(row.split("\t")) == len(header.split("\t")) for row in rows)
    # awk's default field splitting works on the columns before the free-text name
    first = next(row for row in rows if "invoice.lookup" in row).split()
    assert first[:6] == [
        f"{tenant}/billing-agent/invoice.lookup@2.0.0",
        "none",
        "invoice:read",
        "eu",
        "active",
        "unknown",
    ]

    shown = _on_a_terminal(router, "discover", "--tenant", tenant, columns=80)
    assert f"{tenant}/billing-agent/invoice.lookup@2.0.0" in shown  # on one line, not folded
    assert "capabilities" in shown  # the table's title


def test_audit_verify_on_a_terminal_ends_with_one_summary_line(live_server):
    _, env, _ = live_server
    primary, secondary = pty.openpty()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "registry.cli", "audit", "verify"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=secondary,
            text=True,
            timeout=120,
        )
    finally:
        os.close(secondary)
        os.close(primary)
    assert result.returncode == 0
    assert result.stdout.count("\n") == 1 and result.stdout.startswith("audit chain intact")


def test_a_malformed_card_file_shows_the_registrys_errors_with_their_paths(live_server, mint, tenant, tmp_path):
    publisher = _env(live_server, mint, tenant, "publisher", "registry:publish")
    card = json.loads((EXAMPLES / "billing-agent.json").read_text())
    card["skills"][0]["sideEffect"] = "sometimes"
    path = tmp_path / "card.json"
    path.write_text(json.dumps(card))
    result = capreg(publisher, "register", str(path), "--tenant", tenant, "--agent-id", "billing-agent", check=False)
    assert result.returncode == 1 and "400 invalid_request" in result.stderr and "sideEffect" in result.stderr
    assert result.stderr.count("\n") == 1


def test_offers_table_and_json(live_server, mint, tenant, tmp_path):
    card = json.loads((EXAMPLES / "billing-agent.json").read_text())
    # A tag of this tenant's own: other tests' public billing agents never match this test's filters.
    for skill in card["skills"]:
        skill["tags"] = [*skill["tags"], tenant]
    path = tmp_path / "card.json"
    path.write_text(json.dumps(card))
    publisher = _env(live_server, mint, tenant, "publisher", "registry:publish")
    capreg(publisher, "register", str(path), "--tenant", tenant, "--agent-id", "billing-agent")
    router = _env(live_server, mint, tenant, "router", "registry:read invoice:read", regions=["eu"])
    none = capreg(router, "offers", "look up an invoice", "--tag", tenant, check=False)
    assert none.returncode == 1 and "no offer" in none.stdout and "unhealthy 1" in none.stdout
    from registry.client import Registry

    with Registry(live_server[0], token=publisher["CAPREG_TOKEN"]) as reg:
        reg.heartbeat(tenant, "billing-agent", "i-7", url="https://billing.example/i-7", ttl=60, load=0.25)
    table = capreg(router, "offers", "look up an invocie", "--tag", tenant, "--ticket-scope", "invoice:read")
    assert f"{tenant}/billing-agent/invoice.lookup@2.0.0" in table.stdout and "i-7" in table.stdout
    assert "granted" in table.stdout and "scope 1" in table.stdout
    answer = json.loads(capreg(router, "offers", "invoice", "--tag", tenant, "--json").stdout)
    assert answer["offers"][0]["instance"]["url"] == "https://billing.example/i-7" and answer["excluded"]["scope"] == 1
    bad = capreg(router, "offers", check=False)
    assert bad.returncode != 0 and "invalid_request" in (bad.stdout + bad.stderr)


def test_withdraw_says_what_it_did_and_again_that_nothing_changed(live_server, mint, tenant):
    publisher = _env(live_server, mint, tenant, "publisher", "registry:publish")
    capreg(
        publisher, "register", str(EXAMPLES / "billing-agent.json"), "--tenant", tenant, "--agent-id", "billing-agent"
    )
    admin = _env(live_server, mint, tenant, "admin", "registry:admin")
    first = capreg(admin, "withdraw", f"{tenant}/billing-agent")
    assert first.stdout.splitlines() == [
        f"withdrew {tenant}/billing-agent: retired 2 version(s), ended 0 lease(s)",
        f"  {tenant}/billing-agent/invoice.lookup@2.0.0",
        f"  {tenant}/billing-agent/invoice.mark-paid@1.1.0",
    ]
    again = json.loads(capreg(admin, "withdraw", f"{tenant}/billing-agent", "--json").stdout)
    assert again["retired"] == [] and again["agentId"] == "billing-agent"
    router = _env(live_server, mint, tenant, "router", "registry:read")
    assert f"{tenant}/billing-agent" not in capreg(router, "discover", "--tenant", tenant).stdout
