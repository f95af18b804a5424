"""registry.client against a real `capreg serve`: every method in sync and async form, problem
bodies as CapregError, retries on 429/503 (a scripted stub server), keep_alive re-registering on
404, and TicketVerifier on expired, foreign and rotated keys."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from registry.client import AsyncRegistry, CapregError, Registry, Ticket, TicketVerifier
from tests.client_support import StubServer, problem
from tests.conftest import ROOT, example, free_port

_open: list = []


def request_closing(*clients) -> None:
    _open.extend(clients)


@pytest.fixture(autouse=True)
def _close_clients():
    yield
    while _open:
        _open.pop().close()


@pytest.fixture
def server(live_server):
    return live_server[0]


def token(mint, tenant: str, sub: str, scopes: str, regions=None) -> str:
    return mint(tenant, sub, scopes, regions=regions)["Authorization"].removeprefix("Bearer ")


def billing_card(tenant: str) -> dict:
    card = example("billing-agent.json")
    return card


@pytest.fixture
def published(server, mint, tenant):
    """billing-agent (public) and ledger-agent registered in `tenant` through the client."""
    with Registry(server, token=token(mint, tenant, "publisher", "registry:publish")) as reg:
        first = reg.register(tenant, "billing-agent", billing_card(tenant))
        reg.register(tenant, "ledger-agent", ROOT / "tests/examples/ledger-agent.json")
    assert first.created and {v.id for v in first.published} >= {"invoice.lookup"}
    return tenant


# The one definition both sides share: the bytes a publisher signs (pure, no I/O, no server import).
SHARED_WITH_THE_SERVER = ("registry.core", "registry.core.registration_payload")


def test_importing_the_client_imports_no_server_code():
    probe = (
        "import sys, registry.client, registry.client.a2a\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('litestar', 'asyncpg', 'granian', 'db', 'auth')\n"
        "             or (m.startswith('registry.') and not m.startswith('registry.client')\n"
        f"                 and m not in {SHARED_WITH_THE_SERVER!r}))\n"
        "print(bad)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_sync_client_for_agents_and_routers(server, mint, published):
    tenant = published
    statuses: list[int] = []
    import httpx

    http = httpx.Client(base_url=server, event_hooks={"response": [lambda r: statuses.append(r.status_code)]})
    router_token = token(mint, tenant, "router", "registry:read invoice:read", regions=["eu"])
    router = Registry(server, http=http, token_provider=lambda: router_token)

    # discover iterates every page (limit=1 forces several) and revalidates by ETag.
    found = list(router.discover(tenant=tenant, tag="finance", limit=1))
    assert len(found) >= 2 and all(c.tenant == tenant for c in found)
    assert {c.id for c in found} >= {"invoice.lookup"}
    statuses.clear()
    again = list(router.discover(tenant=tenant, tag="finance", limit=1))
    assert [c.ref for c in again] == [c.ref for c in found]
    assert statuses and set(statuses) == {304}
    cheap = list(router.discover(tenant=tenant, side_effect_max="none"))
    assert cheap and all(c.side_effect == "none" for c in cheap)

    ref = f"{tenant}/billing-agent/invoice.lookup@^2"
    detail = router.detail(ref)
    assert detail.version == "2.0.0" and detail.input_schema["required"] == ["invoiceId"]
    assert "https://billing.acme.internal/a2a" in detail.urls()
    assert router.tool(ref, format="openai")["function"]["name"] == "invoice_lookup"
    assert router.tool(ref, format="mcp")["name"] == "invoice.lookup"
    tools = router.tools([ref, f"{tenant}/billing-agent/invoice.lookup@2.0.0"])
    assert [t["function"]["name"] for t in tools] == ["invoice_lookup", "invoice_lookup_2"]
    assert tools.refs["invoice_lookup_2"].endswith("@2.0.0")
    mcp_tools = router.mcp_tools([ref])
    assert mcp_tools[0].name == "invoice.lookup" and mcp_tools[0].input_schema["type"] == "object"

    # mint: the same Idempotency-Key replays the same ticket.
    ticket = router.mint_ticket(
        ref,
        scopes=["invoice:read"],
        ttl=120,
        on_behalf_of="user-19",
        resources=["invoice:inv-2026-091"],
        idempotency_key="k-" + tenant,
        max_depth=1,
    )
    assert isinstance(ticket, Ticket) and ticket.ref.endswith("@2.0.0") and ticket.max_depth == 1
    assert (
        router.mint_ticket(
            ref,
            scopes=["invoice:read"],
            ttl=120,
            on_behalf_of="user-19",
            resources=["invoice:inv-2026-091"],
            idempotency_key="k-" + tenant,
            max_depth=1,
        ).jti
        == ticket.jti
    )
    seen = router.introspect(ticket.ticket)
    assert seen.active and seen.sub == "user-19" and seen.aud == f"{tenant}/billing-agent"

    # The billing agent re-delegates a narrower ticket to the ledger agent.
    billing = Registry(server, token=token(mint, tenant, "billing-agent", "invoice:read"))
    request_closing(billing, router, http)
    archive = {
        "name": "Archive",
        "description": "Old invoices",
        "version": "1.0.0",
        "skills": [
            {
                "id": "invoice.archived",
                "name": "Archived invoice",
                "description": "Looks up an archived invoice",
                "version": "1.0.0",
                "sideEffect": "none",
                "scopes": ["invoice:read"],
            }
        ],
    }
    with Registry(server, token=token(mint, tenant, "publisher", "registry:publish")) as publisher:
        publisher.register(tenant, "archive-agent", archive)
    child = billing.mint_ticket(
        f"{tenant}/archive-agent/invoice.archived",
        scopes=["invoice:read"],
        ttl=60,
        resources=["invoice:inv-2026-091"],
        parent_ticket=ticket.ticket,
    )
    assert child.depth == 1 and router.introspect(child.ticket).active
    with pytest.raises(CapregError) as denied:
        billing.mint_ticket(
            f"{tenant}/billing-agent/invoice.mark-paid", scopes=["invoice:write"], parent_ticket=ticket.ticket
        )
    assert denied.value.status == 403 and denied.value.code == "delegation_denied"
    assert denied.value.reason == "scope_escalation" and denied.value.trace_id

    revoked = router.revoke(ticket.jti)
    assert {ticket.jti, child.jti} <= set(revoked.revoked)
    assert not router.introspect(child.ticket).active

    auditor = Registry(server, token=token(mint, tenant, "auditor", "audit:read"))
    grants = list(auditor.grants(active=False, limit=1))
    assert ticket.jti in {g.jti for g in grants}
    events = list(auditor.audit_events(limit=2))
    types = {e.type for e in events}
    assert {"agent.registered", "ticket.granted", "ticket.denied", "ticket.revoked"} <= types
    assert [e.seq for e in events] == sorted(e.seq for e in events)
    assert list(auditor.audit_events(type="ticket.denied"))[0].reason == "scope_escalation"
    auditor.close()


async def test_async_client_has_the_same_methods(server, mint, published):
    assert {n for n in dir(Registry) if not n.startswith("_")} - {"close"} == {
        n for n in dir(AsyncRegistry) if not n.startswith("_")
    } - {"aclose"}
    tenant = published
    async with AsyncRegistry(
        server, token=token(mint, tenant, "router", "registry:read invoice:read", regions=["eu"])
    ) as router:
        found = [c async for c in router.discover(tenant=tenant, limit=1)]
        assert len(found) >= 3
        ref = f"{tenant}/billing-agent/invoice.lookup"
        assert (await router.detail(ref)).version == "2.0.0"
        tools = await router.tools([ref], format="mcp")
        assert tools[0]["name"] == "invoice.lookup" and tools.refs["invoice.lookup"] == ref
        ticket = await router.mint_ticket(ref, scopes=["invoice:read"], ttl=60)
        assert (await router.introspect(ticket.ticket)).active
        assert ticket.jti in (await router.revoke(ticket.jti)).revoked
        with pytest.raises(CapregError) as missing:
            await router.detail(f"{tenant}/billing-agent/no.such@1.0.0")
        assert missing.value.status == 404 and missing.value.code == "not_found"
    async with AsyncRegistry(server, token=token(mint, tenant, "auditor", "audit:read")) as auditor:
        assert ticket.jti in {g.jti async for g in auditor.grants(active=False)}
        assert [e async for e in auditor.audit_events(type="ticket.revoked")]
    async with AsyncRegistry(server, token=token(mint, tenant, "publisher", "registry:publish")) as publisher:
        beat = await publisher.heartbeat(tenant, "billing-agent", "i-async", url="http://127.0.0.1:1/a2a", ttl=30)
        assert beat.health == "healthy"
        assert (await publisher.agent(tenant, "billing-agent")).health == "healthy"


def test_problem_bodies_become_capreg_errors(server, mint, tenant):
    publisher = Registry(server, token=token(mint, tenant, "publisher", "registry:publish"))
    card = billing_card(tenant)
    card["skills"][0]["inputSchema"] = {"type": "string"}
    card["skills"][0]["sideEffect"] = "sometimes"
    with pytest.raises(CapregError) as bad:
        publisher.register(tenant, "billing-agent", card)
    assert bad.value.status == 400 and bad.value.code == "invalid_request"
    assert bad.value.errors and all(e.path for e in bad.value.errors)
    assert "/skills/0" in str(bad.value) or "skills" in str(bad.value)
    with pytest.raises(CapregError) as foreign:
        publisher.register("someone-else", "billing-agent", billing_card(tenant))
    assert (foreign.value.status, foreign.value.code) == (403, "tenant_mismatch")
    with pytest.raises(CapregError) as no_file:
        publisher.register(tenant, "x", "/nonexistent/card.json")
    assert no_file.value.code == "invalid_card" and no_file.value.status is None
    with pytest.raises(CapregError) as bad_ref:
        publisher.detail("not-a-ref")
    assert bad_ref.value.code == "invalid_ref"
    anonymous = Registry(server, token="not-a-jwt")
    request_closing(anonymous, publisher)
    with pytest.raises(CapregError) as unauthenticated:
        list(anonymous.discover())
    assert (unauthenticated.value.status, unauthenticated.value.code) == (401, "invalid_token")


def test_an_unreachable_registry_is_a_clear_error_after_bounded_retries():
    reg = Registry(f"http://127.0.0.1:{free_port()}", retries=2, backoff=0.01)
    request_closing(reg)
    started = time.monotonic()
    with pytest.raises(CapregError) as down:
        list(reg.discover())
    assert down.value.code == "unreachable" and down.value.status is None
    assert "cannot reach the registry" in str(down.value)
    assert time.monotonic() - started < 2


def test_429_and_503_are_retried_honouring_retry_after_and_nothing_else_is():
    page = {"items": [], "nextCursor": None}
    with StubServer() as stub:
        stub.script(
            "GET",
            "/v1/capabilities",
            (429, {"Retry-After": "1"}, problem(429, "rate_limited")),
            (503, {"Retry-After": "0"}, problem(503, "retryable_unavailable")),
            (200, {}, page),
        )
        reg = Registry(stub.url, retries=3, backoff=0.01)
        request_closing(reg)
        started = time.monotonic()
        assert list(reg.discover()) == []
        assert 1.0 <= time.monotonic() - started < 3
        assert stub.count("GET", "/v1/capabilities") == 3

        stub.script("GET", "/v1/agents/", (503, {"Retry-After": "0"}, problem(503, "retryable_unavailable")))
        with pytest.raises(CapregError) as busy:
            reg.agent("acme", "x")
        assert busy.value.status == 503 and busy.value.retry_after == 0
        assert stub.count("GET", "/v1/agents/") == 4  # first try and 3 retries

        stub.script("POST", "/v1/tickets/introspect", (500, {}, problem(500, "internal")))
        with pytest.raises(CapregError):
            reg.introspect("x.y.z")
        assert stub.count("POST", "/v1/tickets/introspect") == 1

        ticket = {
            "ticket": "t",
            "jti": "j",
            "expiresAt": "2030-01-01T00:00:00Z",
            "scopes": ["a"],
            "resources": [],
            "ref": "acme/a/s@1.0.0",
            "depth": 0,
            "maxDepth": 0,
        }
        stub.script(
            "POST", "/v1/tickets", (503, {"Retry-After": "0"}, problem(503, "retryable_unavailable")), (201, {}, ticket)
        )
        assert reg.mint_ticket("acme/a/s@1", scopes=["a"]).jti == "j"
        keys = [r["headers"].get("Idempotency-Key") for r in stub.requests if r["path"] == "/v1/tickets"]
        assert len(keys) == 2 and keys[0] and keys[0] == keys[1]


async def test_async_retries_honour_retry_after():
    with StubServer() as stub:
        stub.script(
            "GET",
            "/v1/capabilities",
            (429, {"Retry-After": "0"}, problem(429, "rate_limited")),
            (200, {}, {"items": [], "nextCursor": None}),
        )
        async with AsyncRegistry(stub.url, backoff=0.01) as reg:
            assert [c async for c in reg.discover()] == []
        assert stub.count("GET", "/v1/capabilities") == 2


def test_keep_alive_registers_on_404_and_heartbeats_in_the_background(server, mint, tenant):
    card = billing_card(tenant)
    with Registry(server, token=token(mint, tenant, "publisher", "registry:publish")) as reg:
        # Never registered: the first heartbeat is a 404, so keep_alive registers, then beats.
        with reg.keep_alive(
            tenant, "billing-agent", "i-1", url="http://127.0.0.1:9/a2a", ttl=5, fraction=0.1, card=card
        ) as alive:
            assert alive.state.registrations == 1 and alive.state.beats >= 1
            deadline = time.monotonic() + 5
            while alive.state.beats < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert alive.state.beats >= 3
            assert reg.agent(tenant, "billing-agent").health == "healthy"
        assert not alive._thread.is_alive() and not alive.state.running


def test_keep_alive_backs_off_on_503_reregisters_on_404_and_reports_load():
    beat = {"health": "healthy", "expiresAt": "2030-01-01T00:00:00Z"}
    registered = {"agent": {"tenant": "acme", "agentId": "a"}, "published": [], "unchanged": []}
    with StubServer() as stub:
        stub.script(
            "POST",
            "/v1/agents/acme/a/heartbeat",
            (200, {}, beat),
            (503, {"Retry-After": "0"}, problem(503, "retryable_unavailable")),
            (404, {}, problem(404, "not_found")),
            (200, {}, beat),
            then=(200, {}, beat),
        )
        stub.script("PUT", "/v1/agents/acme/a", (200, {}, registered))
        loads = iter([0.25, 0.5, 0.75, 1.0] + [0.1] * 1000)
        with Registry(stub.url) as reg:
            with reg.keep_alive(
                "acme", "a", "i-1", ttl=5, fraction=0.1, load=lambda: next(loads), card={"name": "A", "skills": []}
            ) as alive:
                deadline = time.monotonic() + 5
                while alive.state.beats < 4 and time.monotonic() < deadline:
                    time.sleep(0.05)
        assert alive.state.registrations == 1 and alive.state.failures >= 1
        assert alive.state.history[:4] == ["beat", "failed 503 retryable_unavailable", "registered", "beat"]
        beats = [r["body"] for r in stub.requests if r["path"].endswith("/heartbeat")]
        assert [b["load"] for b in beats[:2]] == [0.25, 0.5]
        assert beats[0]["ttlSeconds"] == 5 and beats[0]["instanceId"] == "i-1"
        count = len(stub.requests)
        time.sleep(0.7)
        assert len(stub.requests) == count  # stopped: nothing more is sent


async def test_async_keep_alive_reregisters_and_stops(server, mint, tenant):
    async with AsyncRegistry(server, token=token(mint, tenant, "publisher", "registry:publish")) as reg:
        async with reg.keep_alive(
            tenant, "billing-agent", "i-2", ttl=5, fraction=0.1, card=billing_card(tenant)
        ) as alive:
            for _ in range(100):
                if alive.state.beats >= 2:
                    break
                await asyncio.sleep(0.05)
            assert alive.state.registrations == 1 and alive.state.beats >= 2
        assert alive._task.done()


def test_keep_alive_fails_fast_on_a_bad_token(server, tenant):
    with Registry(server, token="bad") as reg, pytest.raises(CapregError) as bad:
        with reg.keep_alive(tenant, "x", "i-1", card={"name": "x"}):
            pass
    assert bad.value.code == "invalid_token"


# ---------------------------------------------------------------------------
# TicketVerifier


def test_verifier_accepts_the_registrys_tickets_and_checks_scope_skill_and_audience(server, mint, published):
    tenant = published
    router = Registry(server, token=token(mint, tenant, "router", "registry:read invoice:read", regions=["eu"]))
    ticket = router.mint_ticket(f"{tenant}/billing-agent/invoice.lookup", scopes=["invoice:read"], ttl=60)
    verifier = TicketVerifier(server, audience=f"{tenant}/billing-agent")
    other = TicketVerifier(server, audience=f"{tenant}/ledger-agent")
    claims = verifier.verify(ticket.ticket, scope="invoice:read", skill="invoice.lookup")
    assert claims.jti == ticket.jti and claims.scopes == ["invoice:read"] and claims.caller == f"{tenant}/router"
    for kwargs, reason in [
        ({"scope": "invoice:write"}, "insufficient_scope"),
        ({"skill": "invoice.void"}, "wrong_skill"),
    ]:
        with pytest.raises(CapregError) as refused:
            verifier.verify(ticket.ticket, **kwargs)
        assert (refused.value.code, refused.value.reason) == ("invalid_ticket", reason)
    with pytest.raises(CapregError) as elsewhere:
        other.verify(ticket.ticket)
    assert elsewhere.value.reason == "wrong_audience"
    with pytest.raises(CapregError) as caller_token:
        verifier.verify(token(mint, tenant, "router", "invoice:read"))
    assert caller_token.value.reason == "wrong_type"

    online = TicketVerifier(
        server,
        audience=f"{tenant}/billing-agent",
        check_revocation=True,
        token=token(mint, tenant, "billing-agent", ""),
    )
    assert online.verify(ticket.ticket).jti == ticket.jti
    router.revoke(ticket.jti)
    assert verifier.verify(ticket.ticket).jti == ticket.jti  # offline cannot know
    with pytest.raises(CapregError) as revoked:
        online.verify(ticket.ticket)
    assert revoked.value.reason == "inactive"
    for closable in (router, verifier, other, online):
        closable.close()


def _key(kid: str):
    private = Ed25519PrivateKey.generate()
    public = json.loads(jwt.algorithms.OKPAlgorithm.to_jwk(private.public_key()))
    return private, {**public, "kid": kid, "alg": "EdDSA", "use": "sig"}


def _ticket(private, kid: str, **claims) -> str:
    now = int(time.time())
    payload = {
        "iss": "capreg",
        "sub": "user-19",
        "aud": "acme/billing-agent",
        "iat": now,
        "nbf": now,
        "exp": now + 60,
        "jti": "j-" + kid,
        "tenant": "acme",
        "scope": "invoice:read",
        "cap": {"ref": "acme/billing-agent/invoice.lookup@2.0.0", "id": "invoice.lookup", "version": "2.0.0"},
        "act": {"sub": "acme/router"},
        "resources": [],
        "depth": 0,
        "maxDepth": 0,
        **claims,
    }
    return jwt.encode(payload, private, algorithm="EdDSA", headers={"kid": kid, "typ": "capreg-ticket+jwt"})


def test_verifier_expired_foreign_and_rotated_keys():
    old, old_jwk = _key("k-old")
    new, new_jwk = _key("k-new")
    newer, newer_jwk = _key("k-newer")
    foreign, _ = _key("k-old")  # same kid, another key: a forgery
    with StubServer() as stub:
        stub.script(
            "GET",
            "/.well-known/jwks.json",
            (200, {}, {"keys": [old_jwk]}),
            then=(200, {}, {"keys": [old_jwk, new_jwk]}),
        )
        verifier = TicketVerifier(stub.url, audience="acme/billing-agent", leeway=5)
        request_closing(verifier)
        assert verifier.verify(_ticket(old, "k-old")).sub == "user-19"
        for ticket, reason in [
            (_ticket(old, "k-old", exp=int(time.time()) - 60), "expired"),
            (_ticket(old, "k-old", nbf=int(time.time()) + 120), "not_yet_valid"),
            (_ticket(foreign, "k-old"), "bad_signature"),
            (_ticket(old, "k-old", iss="someone-else"), "wrong_issuer"),
            ("not.a.jwt", "malformed"),
            (
                jwt.encode(
                    {"sub": "x"},
                    "secret-long-enough-for-hmac-0123456789",
                    algorithm="HS256",
                    headers={"typ": "capreg-ticket+jwt", "kid": "k-old"},
                ),
                "wrong_algorithm",
            ),
        ]:
            with pytest.raises(CapregError) as refused:
                verifier.verify(ticket)
            assert (refused.value.code, refused.value.reason) == ("invalid_ticket", reason), ticket
        assert stub.count("GET", "/.well-known/jwks.json") == 1

        # Rotation: an unknown kid fetches the JWKS again (once), and both keys verify.
        verifier.refetch_interval = 0
        assert verifier.verify(_ticket(new, "k-new")).jti == "j-k-new"
        assert verifier.verify(_ticket(old, "k-old")).jti == "j-k-old"
        assert stub.count("GET", "/.well-known/jwks.json") == 2

        # At most one fetch per refetch_interval for unknown kids: a flood of them costs one.
        verifier.refetch_interval = 30
        for _ in range(5):
            with pytest.raises(CapregError) as unknown:
                verifier.verify(_ticket(newer, "k-newer"))
            assert unknown.value.reason == "unknown_key"
        assert stub.count("GET", "/.well-known/jwks.json") == 2
        del newer_jwk


def test_the_readme_python_section_works_when_pasted(server, mint, tenant, monkeypatch, capsys):
    from tests.ticket_support import readme_python

    code = readme_python("from registry.client import Registry").replace('"acme', f'"{tenant}')
    monkeypatch.setenv("CAPREG_URL", server)
    monkeypatch.setenv("AGENT_TOKEN", token(mint, tenant, "billing-agent", "registry:publish"))
    monkeypatch.setenv("ROUTER_TOKEN", token(mint, tenant, "router", "registry:read invoice:read", regions=["eu"]))
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102
    assert capsys.readouterr().out.strip() == "invoice_lookup user-19"
    for name in ("agent", "router", "verifier"):
        namespace[name].close()


def _offer_card(tenant: str) -> dict:
    """The billing card, its lookup named with the tenant's id so that it ranks first for this test
    whatever other tests' public agents the live server holds."""
    card = {**billing_card(tenant), "visibility": "tenant"}
    card["skills"] = [{**card["skills"][0], "name": f"Look up an invoice {tenant}"}, *card["skills"][1:]]
    return card


async def test_offers_sync_and_async(server, mint, tenant):
    with Registry(server, token=token(mint, tenant, "publisher", "registry:publish")) as publisher:
        publisher.register(tenant, "billing-agent", _offer_card(tenant))
        publisher.heartbeat(tenant, "billing-agent", "i-1", url="http://127.0.0.1:1/a2a", ttl=60, load=0.4)
    reader = token(mint, tenant, "router", "registry:read invoice:read", regions=["eu"])
    with Registry(server, token=reader) as router:
        answer = router.offers(f"look up an invocie {tenant}", limit=3, ticket={"scopes": ["invoice:read"], "ttl": 60})
        first = answer.offers[0]
        assert first.ref == f"{tenant}/billing-agent/invoice.lookup@2.0.0" and first.instance.instance_id == "i-1"
        assert first.instance.load == 0.4 and 0 <= first.score <= 1 and 0 < first.why.relevance <= 1
        assert isinstance(first.ticket, Ticket) and first.ticket.scopes == ["invoice:read"]
        assert answer.excluded.scope >= 1  # invoice.mark-paid needs invoice:write
        by_skill = router.offers(skill="invoice.lookup", limit=20)
        assert first.ref in [o.ref for o in by_skill.offers] and by_skill.offers[0].ticket is None
        assert {o.id for o in by_skill.offers} == {"invoice.lookup"}
        with pytest.raises(CapregError) as bad:
            router.offers()
        assert bad.value.status == 400 and bad.value.code == "invalid_request"
    async with AsyncRegistry(server, token=reader) as router:
        again = await router.offers(f"invoice {tenant}", side_effect_max="none", ticket={"scopes": ["invoice:write"]})
        assert again.offers[0].ref == first.ref
        assert again.offers[0].ticket is None and again.offers[0].ticket_error["reason"] == "scope_escalation"
    with Registry(server, token=token(mint, tenant, "router", "invoice:read")) as no_read:
        with pytest.raises(CapregError) as forbidden:
            no_read.offers("invoice")
        assert forbidden.value.status == 403 and forbidden.value.code == "insufficient_scope"


def test_the_client_sends_only_query_parameters_the_server_declares():
    """Every keyword of the listing calls set at once: each name it sends is one the OpenAPI document
    declares for that operation (the server refuses any other, issue 37)."""
    from urllib.parse import parse_qsl, urlsplit

    document = json.loads((ROOT / "openapi" / "openapi.json").read_text())
    page = {"items": [], "nextCursor": None}
    tool = {"type": "function", "function": {"name": "x", "parameters": {}}}
    with StubServer() as stub:
        for path in ("/v1/capabilities", "/v1/audit/grants", "/v1/audit/events"):
            stub.script("GET", path, (200, {}, page))
        stub.script("GET", "/v1/agents/", (200, {}, tool))
        reg = Registry(stub.url, token="t")
        request_closing(reg)
        list(
            reg.discover(
                "invoice",
                tag=["a", "b"],
                skill="invoice.pay",
                side_effect_max="none",
                region="eu",
                health="healthy",
                agent="billing-agent",
                tenant="acme",
                status="active",
                versions="all",
                limit=5,
            )
        )
        list(reg.grants(actor="acme/router", skill="invoice.pay", scope="invoice:read", active=False, limit=5))
        list(
            reg.audit_events(
                type="ticket.denied",
                actor="acme/router",
                skill="invoice.pay",
                scope="invoice:read",
                since="2026-01-01T00:00:00Z",
                until="2026-01-02T00:00:00Z",
                limit=5,
            )
        )
        reg.tool("acme/billing-agent/invoice.pay@1.0.0", "openai")
        sent = [urlsplit(r["path"]) for r in stub.requests]
    templates = {
        "/v1/capabilities": "/v1/capabilities",
        "/v1/audit/grants": "/v1/audit/grants",
        "/v1/audit/events": "/v1/audit/events",
        "/v1/agents/acme/billing-agent/skills/invoice.pay/versions/1.0.0/tool": (
            "/v1/agents/{tenant}/{agent_id}/skills/{skill_id}/versions/{version}/tool"
        ),
    }
    assert sorted({url.path for url in sent}) == sorted(templates)
    for url in sent:
        names = {name for name, _ in parse_qsl(url.query, keep_blank_values=True)}
        declared = {
            p["name"] for p in document["paths"][templates[url.path]]["get"]["parameters"] if p["in"] == "query"
        }
        assert names and names <= declared, (url.path, names - declared)
