"""The security console in a real headless Chromium (Playwright for Python driving Debian's chromium)
against a real `capreg serve`: tokens pasted as a user would, tickets minted and revoked through the
API, a tampered log, a hostile registrant's strings, and every request the page makes intercepted.

Skipped, with the reason in the summary, when no Chromium or no Playwright is installed;
CAPREG_REQUIRE_BROWSER=1 (set by .ci/run) turns that skip into a failure. With
CAPREG_SCREENSHOTS=<dir> the tests save the screenshots used by docs/console.md.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import pytest_asyncio

from auth.tokens import mint_caller_token
from db.pool import connect
from registry.audit.chain import make_checkpoint
from registry.core.signing_keys import load_keyring
from tests.audit_support import fresh_database
from tests.conftest import example, server_home, start_server, stop_server

CHROMIUM = os.environ.get("CAPREG_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
HOSTILE = "<img src=x onerror=alert(1)>"
SCREENSHOTS = os.environ.get("CAPREG_SCREENSHOTS")
WIDTH = 1280  # a common laptop screen: tables must stay readable at this width


def _missing_browser() -> str | None:
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed (pip install -e '.[test]')"
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium, or set CAPREG_CHROMIUM)"
    return None


_MISSING = _missing_browser()
if _MISSING and os.environ.get("CAPREG_REQUIRE_BROWSER") == "1":
    raise RuntimeError(f"CAPREG_REQUIRE_BROWSER=1 but the browser tests cannot run: {_MISSING}")
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=f"console browser tests skipped: {_MISSING}")

if _MISSING is None:
    from playwright.async_api import Page, async_playwright, expect


class Server:
    """A `capreg serve` process on a database of its own, and tokens signed with its keys."""

    def __init__(self, base: str, database_url: str):
        self.base = base
        self.database_url = database_url
        self.host = urlsplit(base).netloc
        self.http = httpx.AsyncClient(base_url=base, timeout=30)
        self._keyring = None

    async def token(self, tenant: str, sub: str, scopes: str, ttl: int = 3600) -> str:
        if self._keyring is None:
            conn = await connect(self.database_url)
            try:
                self._keyring = await load_keyring(conn)
            finally:
                await conn.close()
        return mint_caller_token(
            self._keyring,
            issuer=os.environ.get("CAPREG_ISSUER", "capreg"),
            audience=os.environ.get("CAPREG_AUDIENCE", "capreg"),
            tenant=tenant,
            sub=sub,
            scopes=scopes.split(),
            ttl=ttl,
        )

    async def checkpoint(self) -> int:
        """Sign the chain head now (as the server's checkpoint writer does); returns its seq."""
        conn = await connect(self.database_url)
        try:
            signed = await make_checkpoint(
                conn, await load_keyring(conn), os.environ.get("CAPREG_ISSUER", "capreg"), at=datetime.now(UTC)
            )
        finally:
            await conn.close()
        return signed.seq

    async def call(self, method: str, path: str, token: str, **kwargs) -> httpx.Response:
        return await self.http.request(method, path, headers={"Authorization": f"Bearer {token}"}, **kwargs)

    async def register(self, tenant: str, agent_id: str, card: dict) -> None:
        response = await self.call(
            "PUT",
            f"/v1/agents/{tenant}/{agent_id}",
            await self.token(tenant, "publisher", "registry:publish"),
            json=card,
        )
        assert response.status_code == 201, response.text

    async def mint_ticket(self, tenant: str, **body) -> httpx.Response:
        caller = await self.token(tenant, "router", "invoice:read invoice:write")
        request = {
            "audience": f"{tenant}/billing-agent",
            "skill": "invoice.lookup",
            "version": "^2",
            "scopes": ["invoice:read"],
            "ttlSeconds": 600,
            **body,
        }
        return await self.call("POST", "/v1/tickets", caller, json=request)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def server(server_url):
    """One server for the module's tests (each test uses fresh tenants), on a fresh database."""
    async with running_server(server_url) as running:
        yield running


class running_server:
    """`async with running_server(url) as server`: a Server on a fresh database, stopped and dropped after."""

    def __init__(self, server_url: str):
        self.server_url = server_url

    async def __aenter__(self) -> Server:
        self.database = fresh_database(self.server_url)
        url = await self.database.__aenter__()
        self.home = server_home()
        self.process, base, _ = await asyncio.to_thread(start_server, self.home, url)
        self.server = Server(base, url)
        return self.server

    async def __aexit__(self, *exc) -> None:
        await self.server.http.aclose()
        await asyncio.to_thread(stop_server, self.process)
        shutil.rmtree(self.home, ignore_errors=True)
        await self.database.__aexit__(None, None, None)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def browser():
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        await launched.close()


class Tab:
    """A page plus everything it did: each request's host, dialogs opened, console errors."""

    def __init__(self, page: Page, server: Server):
        self.page = page
        self.server = server
        self.hosts: list[str] = []
        self.dialogs: list[str] = []
        self.errors: list[str] = []

    async def open(self, fragment: str, token: str | None = None) -> None:
        await self.page.goto(f"{self.server.base}/console#{fragment}")
        if token is not None:
            await self.page.fill("#token-input", token)
            await self.page.click("#login-form button[type=submit]")

    async def screenshot(self, name: str) -> None:
        if SCREENSHOTS:
            Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
            await self.page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}.png"), full_page=False)


@pytest_asyncio.fixture(loop_scope="session")
async def tab(browser, server):
    context = await browser.new_context(viewport={"width": WIDTH, "height": 860})
    page = await context.new_page()
    opened = Tab(page, server)

    async def intercept(route):
        host = urlsplit(route.request.url).netloc
        opened.hosts.append(host)
        if host == server.host or route.request.url.startswith(("blob:", "data:")):
            await route.continue_()
        else:  # never let the page reach anything else, and remember that it tried
            await route.abort()

    await context.route("**/*", intercept)
    page.on("dialog", lambda dialog: (opened.dialogs.append(dialog.message), asyncio.ensure_future(dialog.dismiss())))
    page.on("console", lambda message: opened.errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: opened.errors.append(str(error)))
    yield opened
    await context.close()
    assert set(opened.hosts) <= {server.host}, f"requests left for other hosts: {set(opened.hosts) - {server.host}}"


def fresh_tenant() -> str:
    return "c" + secrets.token_hex(5)


async def auditor(server: Server, tenant: str, extra: str = "") -> str:
    return await server.token(tenant, "secops", f"audit:read registry:read {extra}".strip())


async def test_a_minted_ticket_is_on_the_grants_page_and_revoked_from_it(server, tab):
    tenant = fresh_tenant()
    await server.register(tenant, "billing-agent", example("billing-agent.json"))
    minted = (await server.mint_ticket(tenant, onBehalfOf="user-19")).json()
    token = await auditor(server, tenant, "registry:admin")

    await tab.open("grants", token)
    row = tab.page.locator(f"tr[data-jti='{minted['jti']}']")
    await expect(row).to_contain_text(f"{tenant}/billing-agent/invoice.lookup@2.0.0")
    await expect(row).to_contain_text("user-19")
    await expect(row).to_contain_text(f"{tenant}/router")
    await row.locator("button.show-chain").click()
    chain = tab.page.locator("tr.detail:not([hidden]) ol.delegation")
    await expect(chain).to_contain_text("on behalf of user-19")
    await expect(chain).to_contain_text(f"minted by {tenant}/router")
    await tab.screenshot("grants")

    await row.locator("button.revoke").click()
    await expect(row).to_contain_text(f"Revoke {minted['jti']} and every ticket delegated from it?")
    await row.locator("button.confirm-revoke").click()
    await expect(row).to_contain_text("Revoked (1 ticket)")
    await expect(row.locator(".status")).to_have_text("revoked")

    introspection = await server.call("POST", "/v1/tickets/introspect", token, json={"ticket": minted["ticket"]})
    assert introspection.json()["active"] is False
    assert tab.errors == []


async def test_events_filter_to_denials_highlighted_with_a_chart(server, tab):
    tenant = fresh_tenant()
    await server.register(tenant, "billing-agent", example("billing-agent.json"))
    assert (await server.mint_ticket(tenant)).status_code == 201
    for _ in range(3):  # invoice:write is not a scope of invoice.lookup: refused
        assert (await server.mint_ticket(tenant, scopes=["invoice:write"])).status_code == 403

    await tab.open("events", await auditor(server, tenant))
    await expect(tab.page.locator("tr.event").first).to_be_visible()
    assert await tab.page.locator("tr.event:not(.denied)").count() > 0
    await expect(tab.page.locator("figure.chart rect.denied").first).to_be_attached()
    await expect(tab.page.locator("figure.chart figcaption")).to_contain_text("denied 3")
    await tab.screenshot("events")

    await tab.page.select_option("#filter-outcome", "denied")
    await tab.page.click("form.filters button[type=submit]")
    await expect(tab.page.locator("tr.event")).to_have_count(3)
    assert await tab.page.locator("tr.event.denied").count() == 3
    await expect(tab.page.locator("tr.event").first).to_contain_text("scope_escalation")

    async with tab.page.expect_download() as download_info:
        await tab.page.click("button.export")
    download = await download_info.value
    lines = Path(await download.path()).read_text().splitlines()
    assert len(lines) == 3 and all('"outcome":"denied"' in line for line in lines)
    assert tab.errors == []


async def test_events_page_by_cursor(server, tab):
    tenant = fresh_tenant()
    await server.register(tenant, "billing-agent", example("billing-agent.json"))
    for _ in range(4):
        assert (await server.mint_ticket(tenant)).status_code == 201
    await tab.open("events?limit=50&type=ticket.granted", await auditor(server, tenant))
    await expect(tab.page.locator("tr.event")).to_have_count(4)
    await tab.open(
        "events?limit=50&type=ticket.granted&since=2000-01-01T00:00:00Z"
    )  # chart range refused, list still shown
    await expect(tab.page.locator("tr.event")).to_have_count(4)
    await expect(tab.page.locator(".chart-box .failed")).to_contain_text("No chart")


async def test_the_chain_page_reports_a_verified_checkpoint(server, tab):
    tenant = fresh_tenant()
    await server.register(tenant, "billing-agent", example("billing-agent.json"))
    seq = await server.checkpoint()
    assert seq > 0
    await tab.open("chain", await auditor(server, tenant))
    await expect(tab.page.locator(".signature .verdict")).to_have_text(
        "Signature verified in this browser (Ed25519, WebCrypto) with the registry's published keys."
    )
    await expect(tab.page.locator(".chain-status .verdict")).to_contain_text(" verified: ")
    await expect(tab.page.locator(".chain-status .verdict")).to_contain_text(
        f"the latest checkpoint was signed at seq {seq}"
    )
    await expect(tab.page.locator(".signature dl")).to_contain_text(str(seq))
    await tab.screenshot("chain")
    assert tab.errors == []


async def test_a_tampered_log_shows_its_first_bad_seq(server_url, browser):
    async with running_server(server_url) as tampered:
        tenant = fresh_tenant()
        await tampered.register(tenant, "billing-agent", example("billing-agent.json"))
        assert (await tampered.mint_ticket(tenant)).status_code == 201
        assert await tampered.checkpoint() > 2
        conn = await connect(tampered.database_url)
        try:  # as the superuser, past the append-only triggers (tests/audit/test_audit_tamper.py)
            await conn.execute("ALTER TABLE audit_events DISABLE TRIGGER ALL")
            await conn.execute("UPDATE audit_events SET reason = 'tampered' WHERE seq = 2")
        finally:
            await conn.close()
        context = await browser.new_context()
        try:
            page = await context.new_page()
            await page.goto(f"{tampered.base}/console#chain")
            await page.fill("#token-input", await auditor(tampered, tenant))
            await page.click("#login-form button[type=submit]")
            await expect(page.locator(".chain-status .verdict")).to_have_text(
                "Chain BROKEN: first bad chainSeq 2 (seq 2)."
            )
            await expect(page.locator(".chain-status .problem")).to_contain_text("edited")
            if SCREENSHOTS:
                await page.screenshot(path=str(Path(SCREENSHOTS) / "chain-broken.png"))
        finally:
            await context.close()


async def test_hostile_strings_render_as_text_and_run_nothing(server, tab):
    tenant = fresh_tenant()
    card = example("billing-agent.json")
    card["name"] = card["description"] = HOSTILE
    card["skills"][0]["name"] = card["skills"][0]["description"] = HOSTILE
    card["visibility"] = "tenant"
    await server.register(tenant, "billing-agent", card)
    assert (await server.mint_ticket(tenant, onBehalfOf=HOSTILE)).status_code == 201

    await tab.open(f"capability?id=invoice.lookup&tenant={tenant}", await auditor(server, tenant))
    agent = tab.page.locator("section.agent").first
    await expect(agent.locator("h4")).to_contain_text(HOSTILE)
    await expect(agent.locator(".agent-description")).to_have_text(HOSTILE)
    version = tab.page.locator("tr.version").first
    await expect(version.locator("td.description")).to_have_text(HOSTILE)
    await expect(tab.page.locator("tr.grant").first).to_contain_text(HOSTILE)
    await expect(version).to_contain_text("2.0.0")
    await expect(version).to_contain_text("invoice:read")
    await expect(version).to_contain_text("eu")
    assert await tab.page.locator("main img").count() == 0
    await tab.screenshot("capability")
    await tab.open("grants")
    await expect(tab.page.locator("tr.grant").first).to_contain_text(HOSTILE)
    assert await tab.page.locator("main img").count() == 0
    await asyncio.sleep(0.3)  # an onerror handler would have fired by now
    assert tab.dialogs == []
    assert tab.errors == []


async def test_no_request_leaves_for_another_host_and_headers_are_strict(server, tab):
    tenant = fresh_tenant()
    await server.register(tenant, "billing-agent", example("billing-agent.json"))
    response = await tab.page.goto(f"{server.base}/console#grants")
    headers = response.headers
    assert "default-src 'self'" in headers["content-security-policy"]
    assert "script-src 'self'" in headers["content-security-policy"]
    assert "'unsafe-inline'" not in headers["content-security-policy"]
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "no-referrer"
    assert headers["x-frame-options"] == "DENY"
    await tab.page.fill("#token-input", await auditor(server, tenant))
    await tab.page.click("#login-form button[type=submit]")
    for fragment in ("grants", "events", "chain", "capability?id=invoice.lookup"):
        await tab.open(fragment)
        await expect(tab.page.locator("main h2")).to_be_visible()
        await tab.page.wait_for_load_state("networkidle")
    assert tab.hosts and set(tab.hosts) == {server.host}
    # No cookie was set, and the token is only in this tab's sessionStorage.
    assert await tab.page.context.cookies() == []
    assert await tab.page.evaluate("document.cookie") == ""


async def test_the_schema_page_renders_offline(server, tab):
    response = await tab.page.goto(f"{server.base}/schema")
    assert "script-src 'self';" in response.headers["content-security-policy"]
    assert "unsafe" not in response.headers["content-security-policy"]
    await expect(tab.page.locator(".swagger-ui .info .title")).to_contain_text("capreg")
    await expect(tab.page.locator(".opblock-summary-path", has_text="/v1/audit/grants").first).to_be_visible()
    await tab.page.locator(".opblock-summary-path", has_text="/v1/audit/grants").first.click()
    await expect(tab.page.locator(".opblock-body").first).to_be_visible()
    await tab.screenshot("schema")
    # The bearer-JWT scheme gives Swagger UI its Authorize button; operations are grouped by area.
    await expect(tab.page.locator(".swagger-ui button.authorize").first).to_be_visible()
    for area in ("agents", "discovery", "release", "versions", "tickets", "approvals", "audit", "ops"):
        await expect(tab.page.locator(f".opblock-tag[data-tag='{area}']")).to_be_visible()
    assert await tab.page.locator(".opblock-tag[data-tag='default']").count() == 0
    assert set(tab.hosts) == {server.host}
    assert tab.errors == []  # no script or style refused by the policy


async def test_an_expired_token_is_refused_and_forgotten(server, tab):
    tenant = fresh_tenant()
    await tab.open("grants", await server.token(tenant, "secops", "audit:read", ttl=-60))
    await expect(tab.page.locator("#notice")).to_contain_text("refused this token")
    await expect(tab.page.locator("#login")).to_be_visible()
    assert await tab.page.evaluate("sessionStorage.length") == 0


async def test_a_token_without_audit_read_is_refused_and_forgotten(server, tab):
    tenant = fresh_tenant()
    await tab.open("events", await server.token(tenant, "secops", "registry:read"))
    await expect(tab.page.locator("#notice")).to_contain_text("lacks a scope the console needs")
    await expect(tab.page.locator("#notice")).to_contain_text("audit:read")
    await expect(tab.page.locator("#login")).to_be_visible()
    assert await tab.page.evaluate("sessionStorage.length") == 0


async def test_a_registry_that_stops_answering_is_retried(server, tab):
    tenant = fresh_tenant()
    await server.register(tenant, "billing-agent", example("billing-agent.json"))
    await server.mint_ticket(tenant)
    failures = 2

    async def unreachable_then_back(route):
        nonlocal failures
        if failures > 0:
            failures -= 1
            await route.abort("connectionrefused")
        else:
            await route.fallback()

    await tab.page.route("**/v1/audit/grants*", unreachable_then_back)
    await tab.open("grants", await auditor(server, tenant))
    await expect(tab.page.locator("#connection")).to_contain_text("The registry is not answering; retrying in")
    await expect(tab.page.locator("tr.grant")).to_have_count(1, timeout=10000)
    await expect(tab.page.locator("#connection")).to_be_hidden()


async def test_thousands_of_grants_are_paged_and_the_page_stays_responsive(server, tab):
    tenant = fresh_tenant()
    await server.register(tenant, "billing-agent", example("billing-agent.json"))
    minted = (await server.mint_ticket(tenant)).json()
    conn = await connect(server.database_url)
    try:  # 2,500 more rows shaped like the real one, written the way the mint writes them
        await conn.execute(
            """INSERT INTO tickets (jti, parent_jti, root_jti, tenant, agent_id, skill_id, version, ref, audience, actor,
                                   actor_tenant, on_behalf_of, scopes, resources, depth, max_depth, issued_at, expires_at,
                                   revoked_at, act, kid)
               SELECT 'bulk' || g, NULL, 'bulk' || g, tenant, agent_id, skill_id, version, ref, audience, actor,
                      actor_tenant, 'user-' || g, scopes, resources, depth, max_depth, issued_at + g * interval '1 ms',
                      expires_at + g * interval '1 s', NULL, act, kid
                 FROM tickets, generate_series(1, 2500) g WHERE jti = $1""",
            minted["jti"],
        )
    finally:
        await conn.close()

    await tab.open("grants?limit=1000", await auditor(server, tenant))
    await expect(tab.page.locator("tr.grant")).to_have_count(1000)
    # Soonest expiry first: the real ticket, then bulk rows in expiry order.
    await expect(tab.page.locator("tr.grant").first).to_have_attribute("data-jti", minted["jti"])
    started = time.monotonic()
    await tab.page.click(".pager button.next")
    await expect(tab.page.locator(".page-number")).to_have_text("page 2")
    await expect(tab.page.locator("tr.grant").first).to_have_attribute("data-jti", "bulk1000")
    await tab.page.click(".pager button.next")
    await expect(tab.page.locator("tr.grant")).to_have_count(501)
    await expect(tab.page.locator(".pager button.next")).to_be_disabled()
    assert time.monotonic() - started < 5
    await tab.page.click(".pager button.prev")
    await expect(tab.page.locator(".page-number")).to_have_text("page 2")
    # The page answers input while showing 1,000 rows.
    latency = await tab.page.evaluate("""() => new Promise((resolve) => {
        const start = performance.now(); setTimeout(() => resolve(performance.now() - start), 0); })""")
    assert latency < 200


# Every identifier element in a table that occupies more than one line box, or may wrap.
_BROKEN_TOKENS = """(selector) => {
  const broken = [];
  for (const node of document.querySelectorAll(`${selector} .token, ${selector} td.time, ${selector} td.ref, ${selector} td.ref a`)) {
    const wraps = getComputedStyle(node).whiteSpace !== "nowrap";
    const lines = new Set(Array.from(node.getClientRects()).map((r) => Math.round(r.top))).size;
    if (wraps || lines > 1) broken.push(`${node.textContent} (${wraps ? "may wrap" : lines + " lines"})`);
  }
  return broken;
}"""


async def test_at_1280_px_no_token_breaks_across_lines(server, tab):
    """Refs, actors, scopes and times stay on one line in the grants and events tables; times are
    relative with the exact time in a tooltip; trace ids are short with a copy button."""
    assert tab.page.viewport_size["width"] == WIDTH
    tenant = fresh_tenant()
    await server.register(tenant, "billing-agent", example("billing-agent.json"))
    for _ in range(3):
        minted = await server.mint_ticket(
            tenant, onBehalfOf="user-19", resources=["invoice:inv-2026-091", "invoice:inv-2026-092"]
        )
        assert minted.status_code == 201
    assert (await server.mint_ticket(tenant, scopes=["invoice:write"])).status_code == 403
    token = await auditor(server, tenant, "registry:admin")

    await tab.open("grants", token)
    await expect(tab.page.locator("tr.grant")).to_have_count(3)
    assert await tab.page.evaluate(_BROKEN_TOKENS, "table.grants") == []
    ref = tab.page.locator("tr.grant td.ref a").first
    assert (await ref.bounding_box())["height"] < 24  # one line of text
    issued = tab.page.locator("tr.grant td.time time").first
    assert re.fullmatch(r"\d+ s ago|\d+ min ago", await issued.inner_text())
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", await issued.get_attribute("title"))
    assert (await tab.page.locator("tr.grant td.time time").nth(1).inner_text()).startswith("in ")
    table = await tab.page.locator("table.grants").bounding_box()
    assert table["x"] + table["width"] <= WIDTH  # revoke buttons included: nothing hidden sideways

    await tab.open("events")
    await expect(tab.page.locator("tr.event").first).to_be_visible()
    assert await tab.page.evaluate(_BROKEN_TOKENS, "table.events") == []
    trace = tab.page.locator("tr.event td.trace code").first
    full = await trace.get_attribute("title")
    assert re.fullmatch(r"[0-9a-f]{32}", full) and await trace.inner_text() == full[:8] + "…"
    # The whole table fits the window: nothing to scroll sideways for, and nothing broken to fit.
    table = await tab.page.locator("table.events").bounding_box()
    assert table["x"] + table["width"] <= WIDTH
    await tab.page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    await tab.page.locator("tr.event td.trace button.copy").first.click()
    await expect(tab.page.locator("tr.event td.trace button.copy").first).to_have_text(re.compile("Copied|Select"))

    icon = await server.http.get("/favicon.ico")
    assert (
        icon.status_code == 200
        and icon.headers["content-type"] == "image/x-icon"
        and icon.content[:4] == b"\x00\x00\x01\x00"
    )
    assert tab.errors == []  # no 404 for the favicon either
