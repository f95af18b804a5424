"""Detail release: capability detail, A2A extended card, tool exports and argument validation,
each gated by visibility, retirement, scopes and data regions, each answer audited exactly once."""

from __future__ import annotations

import json
import re

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientCallContext, ClientConfig, ClientFactory
from a2a.client.errors import A2AClientError, AgentCardResolutionError
from a2a.types import AgentCard, GetExtendedAgentCardRequest
from a2a.utils.proto_utils import validate_proto_required_fields
from google.protobuf.json_format import MessageToDict, ParseDict
from mcp.types import Tool

from registry.agents.cards import CAPREG_EXTENSION_URI
from registry.config import registry_url
from tests.audit_support import ONE_ROW_PER_EVENT
from tests.conftest import example, retire_versions

BILLING = example("billing-agent.json")
LEDGER = example("ledger-agent.json")
LEGACY = example("legacy-0.3-search-agent.json")
GATED = ("inputSchema", "outputSchema", "examples", "billing.acme.internal", "ledger.acme.internal", "look up invoice")
OPENAI_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def path(tenant: str, agent: str, skill: str, version: str, suffix: str = "") -> str:
    return f"/v1/agents/{tenant}/{agent}/skills/{skill}/versions/{version}{suffix}"


async def events_of(db, response: httpx.Response) -> list[dict]:
    """The audit events the request behind `response` wrote (matched by its trace id)."""
    rows = await db.fetch(
        "SELECT type, outcome, tenant, actor_tenant, actor, ref, scopes, reason FROM audit_events "
        "WHERE trace_id = $1 AND " + ONE_ROW_PER_EVENT + " ORDER BY seq",
        # Problem responses carry the header twice (handler and middleware); both are the same id.
        response.headers.get_list("x-trace-id")[0],
    )
    return [dict(r) for r in rows]


def without_trace(response: httpx.Response) -> dict:
    body = response.json()
    body.pop("traceId")
    return body


# --- the capability detail --------------------------------------------------------------------


async def test_detail_releases_schemas_examples_and_endpoints(client, mint, world, db):
    heartbeat = await client.post(
        f"/v1/agents/{world}/billing-agent/heartbeat",
        json={"instanceId": "i-1", "url": "https://billing-1.acme.internal/a2a", "ttlSeconds": 60},
        headers=mint(world, "billing-agent", "registry:publish"),
    )
    assert heartbeat.status_code == 200, heartbeat.text
    router = mint(world, "router", "invoice:read", regions=["eu"])
    response = await client.get(path(world, "billing-agent", "invoice.lookup", "2.0.0"), headers=router)
    assert response.status_code == 200, response.text
    detail = response.json()
    assert detail["ref"] == f"{world}/billing-agent/invoice.lookup@2.0.0"
    assert detail["inputSchema"] == BILLING["skills"][0]["inputSchema"]
    assert detail["outputSchema"] == BILLING["skills"][0]["outputSchema"]
    assert detail["examples"] == ["look up invoice inv-2026-091"]
    assert detail["endpoints"]["interfaces"] == BILLING["supportedInterfaces"]
    [instance] = detail["endpoints"]["instances"]
    assert instance["instanceId"] == "i-1" and instance["url"] == "https://billing-1.acme.internal/a2a"
    assert instance["expiresAt"] == heartbeat.json()["expiresAt"]
    # Every public field is there too, with the same values discovery shows.
    listed = (await client.get("/v1/capabilities", params={"tenant": world, "skill": "invoice.lookup"})).json()[
        "items"
    ][0]
    assert {key: detail[key] for key in listed} == {**listed, "health": "healthy", "updatedAt": detail["updatedAt"]}
    assert await events_of(db, response) == [
        {
            "type": "detail.released",
            "outcome": "allowed",
            "tenant": world,
            "actor_tenant": world,
            "actor": "router",
            "ref": f"{world}/billing-agent/invoice.lookup@2.0.0",
            "scopes": ["invoice:read"],
            "reason": None,
        }
    ]


async def test_public_discovery_never_shows_what_detail_releases(client, mint, world):
    router = mint(world, "router", "registry:read invoice:read ledger:write", regions=["eu"])
    released = await client.get(path(world, "billing-agent", "invoice.lookup", "latest"), headers=router)
    assert released.status_code == 200 and "inputSchema" in released.text
    for url in (
        "/v1/capabilities?versions=all&tenant=" + world,
        f"/v1/agents/{world}/billing-agent",
        f"/v1/agents/{world}/billing-agent/.well-known/agent-card.json",
        f"/v1/agents/{world}/billing-agent/skills/invoice.lookup/versions",
    ):
        for headers in ({}, router):
            response = await client.get(url, headers=headers)
            assert response.status_code == 200, (url, response.text)
            for field in GATED:
                assert field not in response.text, (url, field)


async def test_matrix_of_callers_each_answer_audited_once(client, mint, world, other_tenant, db):
    """The same request for the private ledger capability, as every kind of caller."""
    url = path(world, "ledger-agent", "ledger.reverse-entry", "1.0.0")
    ref = f"{world}/ledger-agent/ledger.reverse-entry@1.0.0"
    stranger = "s" + world
    cases = [
        ("own tenant", mint(world, "router", "ledger:write", regions=["eu"]), 200, None, world),
        ("shared tenant", mint(other_tenant, "router", "ledger:write", regions=["us"]), 200, None, other_tenant),
        ("other tenant", mint(stranger, "router", "ledger:write", regions=["eu"]), 404, "not_found", stranger),
        (
            "missing scope",
            mint(world, "router", "ledger:read registry:admin", regions=["eu"]),
            403,
            "insufficient_scope",
            world,
        ),
        ("wrong region", mint(world, "router", "ledger:write", regions=["ap"]), 403, "data_location_denied", world),
        ("no regions claim", mint(world, "router", "ledger:write"), 403, "data_location_denied", world),
        (
            "shared, missing scope",
            mint(other_tenant, "router", "", regions=["us"]),
            403,
            "insufficient_scope",
            other_tenant,
        ),
    ]
    for name, headers, status, code, actor_tenant in cases:
        response = await client.get(url, headers=headers)
        assert response.status_code == status, (name, response.text)
        events = await events_of(db, response)
        assert len(events) == 1, (name, events)
        [event] = events
        assert event["tenant"] == world and event["actor_tenant"] == actor_tenant and event["actor"] == "router"
        if status == 200:
            assert event["type"] == "detail.released" and event["outcome"] == "allowed" and event["reason"] is None
            assert event["ref"] == ref and event["scopes"] == ["ledger:write"]
            assert response.json()["endpoints"]["interfaces"][0]["url"] == "https://ledger.acme.internal/a2a"
        else:
            assert response.headers["content-type"].startswith("application/problem+json")
            assert response.json()["code"] == code
            assert event["type"] == "detail.denied" and event["outcome"] == "denied" and event["reason"] == code
            # An invisible record is never resolved: its ref is the request as written.
            assert event["ref"] == ref
            assert "inputSchema" not in response.text and "ledger.acme.internal" not in response.text
        if code == "insufficient_scope":
            assert response.json()["missingScopes"] == ["ledger:write"]

    anonymous = await client.get(url)
    assert anonymous.status_code == 401 and anonymous.json()["code"] == "invalid_token"
    assert anonymous.headers["www-authenticate"].startswith("Bearer")
    assert await events_of(db, anonymous) == []
    forged = await client.get(url, headers={"Authorization": "Bearer not-a-jwt"})
    assert forged.status_code == 401 and await events_of(db, forged) == []


async def test_other_tenants_private_record_is_indistinguishable_from_a_missing_one(client, mint, world):
    stranger = mint("s" + world, "router", "ledger:write", regions=["eu"])
    private = await client.get(path(world, "ledger-agent", "ledger.reverse-entry", "1.0.0"), headers=stranger)
    private_latest = await client.get(path(world, "ledger-agent", "ledger.reverse-entry", "latest"), headers=stranger)
    missing = [
        await client.get(path(world, "no-such-agent", "ledger.reverse-entry", "1.0.0"), headers=stranger),
        await client.get(path(world, "ledger-agent", "no.such-skill", "1.0.0"), headers=stranger),
        await client.get(path(world, "billing-agent", "no.such-skill", "1.0.0"), headers=stranger),
        await client.get(path(world, "billing-agent", "invoice.lookup", "9.9.9"), headers=stranger),
        await client.get(path("nobody", "ledger-agent", "ledger.reverse-entry", "1.0.0"), headers=stranger),
    ]
    for response in (private, private_latest, *missing):
        assert response.status_code == 404, response.text
        assert without_trace(response) == without_trace(missing[0])
        assert response.headers["content-type"] == missing[0].headers["content-type"]
    assert without_trace(missing[0])["code"] == "not_found"


async def test_no_registry_scope_needed_and_unscoped_capabilities_need_only_a_token(client, mint, world):
    anyone = mint("x" + world, "router", "")
    response = await client.get(path(world, "docs-search", "docs.search", "latest"), headers=anyone)
    assert response.status_code == 200, response.text
    assert response.json()["inputSchema"]["required"] == ["query"]
    # A 0.3 registration's single url became its interface.
    assert response.json()["endpoints"] == {
        "interfaces": [
            {"url": "https://search.example.org/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}
        ],
        "instances": [],
        "instanceCount": 0,
    }


# --- versions: exact, latest, ranges ------------------------------------------------------------


@pytest.fixture
async def versions(client, mint, tenant, db):
    """invoice.mark-paid at 1.0.0, 1.2.0, 2.0.0, 2.1.0 (retired), 2.5.0 (not yet effective), 3.0.0-rc.1."""
    publish = mint(tenant, "publisher", "registry:publish")
    skill = BILLING["skills"][1]
    for version, extra in (
        ("1.0.0", {}),
        ("1.2.0", {}),
        ("2.0.0", {}),
        ("2.1.0", {}),
        ("2.5.0", {"effectiveAt": "2999-01-01T00:00:00Z"}),
        ("3.0.0-rc.1", {}),
    ):
        body = {**BILLING, "skills": [{**skill, "version": version, **extra}]}
        response = await client.put(f"/v1/agents/{tenant}/b", json=body, headers=publish)
        assert response.status_code == 201, response.text
    await retire_versions(client, mint, db, tenant, skill["id"], "2.1.0")
    return tenant


@pytest.mark.parametrize(
    ("requested", "resolved"),
    [
        ("1.2.0", "1.2.0"),
        ("2.0.0", "2.0.0"),
        ("3.0.0-rc.1", "3.0.0-rc.1"),
        ("latest", "2.0.0"),
        ("^1", "1.2.0"),
        ("~1.0", "1.0.0"),
        ("^2", "2.0.0"),
        (">=2,<3", "2.0.0"),
        (">=2 <3", "2.0.0"),
        ("2", "2.0.0"),
        ("*", "2.0.0"),
        (">=3.0.0-rc.0", "3.0.0-rc.1"),
        ("<2", "1.2.0"),
    ],
)
async def test_version_resolution(client, mint, versions, requested, resolved):
    caller = mint(versions, "router", "invoice:write", regions=["eu"])
    response = await client.get(path(versions, "b", "invoice.mark-paid", requested), headers=caller)
    assert response.status_code == 200, (requested, response.text)
    assert response.json()["version"] == resolved


async def test_latest_is_a_pre_release_only_while_the_skill_has_no_release(client, mint, tenant):
    """`latest` is discovery's latest (auth.policy.LATEST_ORDER): the newest pre-release while no
    release is in force, the release once one is, in detail and discovery alike."""
    publish = mint(tenant, "publisher", "registry:publish")
    caller = mint(tenant, "router", "invoice:write", regions=["eu"])
    skill = BILLING["skills"][1]

    async def latest() -> tuple[str, list[str]]:
        detail = await client.get(path(tenant, "pre", skill["id"], "latest"), headers=caller)
        assert detail.status_code == 200, detail.text
        listed = await client.get("/v1/capabilities", params={"tenant": tenant, "agent": "pre"}, headers=caller)
        return detail.json()["version"], [item["version"] for item in listed.json()["items"]]

    for version, expected in (("1.0.0-rc.1", "1.0.0-rc.1"), ("1.0.0-rc.2", "1.0.0-rc.2"), ("1.0.0", "1.0.0")):
        body = {**BILLING, "skills": [{**skill, "version": version}]}
        response = await client.put(f"/v1/agents/{tenant}/pre", json=body, headers=publish)
        assert response.status_code == 201, response.text
        assert await latest() == (expected, [expected])
    body = {**BILLING, "skills": [{**skill, "version": "1.1.0-rc.1"}]}
    assert (await client.put(f"/v1/agents/{tenant}/pre", json=body, headers=publish)).status_code == 201
    assert await latest() == ("1.0.0", ["1.0.0"])  # a pre-release is never latest while a release is in force


async def test_retired_exact_is_410_and_ranges_skip_it(client, mint, versions, db):
    caller = mint(versions, "router", "invoice:write", regions=["eu"])
    retired = await client.get(path(versions, "b", "invoice.mark-paid", "2.1.0"), headers=caller)
    assert retired.status_code == 410 and retired.json()["code"] == "retired"
    assert [(e["type"], e["reason"], e["ref"]) for e in await events_of(db, retired)] == [
        ("detail.denied", "retired", f"{versions}/b/invoice.mark-paid@2.1.0")
    ]
    # Retirement is checked before scopes: the 410 does not depend on the caller's scopes.
    unscoped = await client.get(path(versions, "b", "invoice.mark-paid", "2.1.0"), headers=mint(versions, "r", ""))
    assert unscoped.status_code == 410
    ranged = await client.get(path(versions, "b", "invoice.mark-paid", "~2.1"), headers=caller)
    assert ranged.status_code == 404 and ranged.json()["code"] == "not_found"
    # A stranger cannot learn about retirement either.
    private = await client.put(
        f"/v1/agents/{versions}/b",
        json={**BILLING, "visibility": "tenant", "skills": [{**BILLING["skills"][1], "version": "2.0.0"}]},
        headers=mint(versions, "publisher", "registry:publish"),
    )
    assert private.status_code == 200, private.text
    stranger = await client.get(
        path(versions, "b", "invoice.mark-paid", "2.1.0"), headers=mint("s" + versions, "r", "invoice:write")
    )
    assert stranger.status_code == 404


@pytest.mark.parametrize("requested", ["9.9.9", "^9", ">=4", "2.5.0", "^2.5", "<1"])
async def test_versions_that_match_nothing_are_404(client, mint, versions, db, requested):
    caller = mint(versions, "router", "invoice:write", regions=["eu"])
    response = await client.get(path(versions, "b", "invoice.mark-paid", requested), headers=caller)
    assert response.status_code == 404, (requested, response.text)
    assert response.json()["code"] == "not_found"
    [event] = await events_of(db, response)
    assert event["type"] == "detail.denied" and event["reason"] == "not_found"
    assert event["ref"] == f"{versions}/b/invoice.mark-paid@{requested}"


@pytest.mark.parametrize("requested", ["^^2", "2.x", ">= 2", "1.2.3.4", "v2", "latest-ish", "2||3", ",", "01.0.0"])
async def test_malformed_ranges_are_400(client, mint, versions, db, requested):
    caller = mint(versions, "router", "invoice:write", regions=["eu"])
    response = await client.get(path(versions, "b", "invoice.mark-paid", requested), headers=caller)
    assert response.status_code == 400, (requested, response.text)
    assert response.json()["code"] == "invalid_request"
    assert await events_of(db, response) == []


# --- tool exports --------------------------------------------------------------------------------


async def test_tool_exports_parse_in_their_ecosystems(client, mint, world, db):
    caller = mint(world, "router", "invoice:read invoice:write", regions=["eu"])
    for skill, version in (("invoice.lookup", "2.0.0"), ("invoice.mark-paid", "^1")):
        mcp = await client.get(
            path(world, "billing-agent", skill, version, "/tool"), params={"format": "mcp"}, headers=caller
        )
        assert mcp.status_code == 200, mcp.text
        tool = Tool.model_validate(mcp.json())
        assert tool.name == skill and tool.input_schema["type"] == "object"
        openai = await client.get(
            path(world, "billing-agent", skill, version, "/tool"), params={"format": "openai"}, headers=caller
        )
        assert openai.status_code == 200, openai.text
        function = openai.json()["function"]
        assert openai.json()["type"] == "function" and OPENAI_NAME.match(function["name"])
        assert function["parameters"]["type"] == "object"
        assert [e["type"] for e in await events_of(db, openai)] == ["detail.released"]
    lookup = Tool.model_validate(
        (
            await client.get(
                path(world, "billing-agent", "invoice.lookup", "2.0.0", "/tool"),
                params={"format": "mcp"},
                headers=caller,
            )
        ).json()
    )
    assert lookup.input_schema == BILLING["skills"][0]["inputSchema"]
    assert lookup.annotations is not None and lookup.annotations.read_only_hint is True


async def test_tool_export_is_gated_and_checks_format(client, mint, world, db):
    url = path(world, "billing-agent", "invoice.lookup", "2.0.0", "/tool")
    no_scope = await client.get(url, params={"format": "mcp"}, headers=mint(world, "router", "", regions=["eu"]))
    assert no_scope.status_code == 403 and no_scope.json()["missingScopes"] == ["invoice:read"]
    assert [e["reason"] for e in await events_of(db, no_scope)] == ["insufficient_scope"]
    us_only = await client.get(
        url, params={"format": "openai"}, headers=mint(world, "router", "invoice:read", regions=["us"])
    )
    assert us_only.status_code == 403 and us_only.json()["code"] == "data_location_denied"
    assert (await client.get(url, params={"format": "mcp"})).status_code == 401
    caller = mint(world, "router", "invoice:read", regions=["eu"])
    for params in ({"format": "yaml"}, {}, {"format": "MCP"}):
        bad = await client.get(url, params=params, headers=caller)
        assert bad.status_code == 400 and bad.json()["code"] == "invalid_request", (params, bad.text)
        assert await events_of(db, bad) == []
    private = path(world, "ledger-agent", "ledger.reverse-entry", "1.0.0", "/tool")
    stranger = await client.get(
        private, params={"format": "mcp"}, headers=mint("s" + world, "r", "ledger:write", regions=["eu"])
    )
    assert stranger.status_code == 404


# --- argument validation -------------------------------------------------------------------------


@pytest.fixture
def validate(client, mint, world):
    url = path(world, "billing-agent", "invoice.lookup", "^2", "/validate")
    caller = mint(world, "router", "invoice:read", regions=["eu"])

    async def _validate(body, headers=None, **kwargs) -> httpx.Response:
        if "content" in kwargs:
            return await client.post(url, headers={"Content-Type": "application/json", **(headers or caller)}, **kwargs)
        return await client.post(url, json=body, headers=headers or caller)

    return _validate


async def test_validate_objects_and_text(validate, db):
    ok = await validate({"arguments": {"invoiceId": "inv-2026-091"}})
    assert ok.status_code == 200, ok.text
    assert ok.json() == {"valid": True, "arguments": {"invoiceId": "inv-2026-091"}, "errors": [], "warnings": []}
    assert [e["type"] for e in await events_of(db, ok)] == ["detail.released"]

    strict = await validate({"arguments": {"invoiceId": "nope", "extra": 1}, "mode": "strict"})
    assert strict.status_code == 200 and strict.json()["valid"] is False
    assert {e["path"] for e in strict.json()["errors"]} == {"/invoiceId", "/extra"}

    lenient = await validate({"arguments": {"invoiceId": "inv-2026-091", "extra": 1}, "mode": "lenient"})
    assert lenient.json()["valid"] is True
    assert lenient.json()["arguments"] == {"invoiceId": "inv-2026-091", "includeLines": False}
    assert lenient.json()["warnings"] == [{"path": "/extra", "message": "unknown property 'extra' dropped"}]

    text = 'Sure! Here are the arguments:\n```json\n{"invoiceId": "inv-2026-091"}\n```\nAnything else?'
    from_text = await validate({"arguments": text})
    assert from_text.json()["valid"] is True and from_text.json()["arguments"] == {"invoiceId": "inv-2026-091"}


async def test_arguments_that_are_not_json(validate, db):
    prose = await validate({"arguments": "I could not find the invoice id, sorry. {not json either"})
    assert prose.status_code == 200, prose.text
    body = prose.json()
    assert body["valid"] is False and body["arguments"] is None
    assert body["errors"] == [{"path": "", "message": "no JSON object found in the text"}]
    assert [e["type"] for e in await events_of(db, prose)] == ["detail.released"]
    not_an_object = await validate({"arguments": [1, 2]})
    assert not_an_object.status_code == 400 and not_an_object.json()["code"] == "invalid_request"
    for raw in (
        b"{not json",
        b"",
        b'{"arguments": {}, "mode": "sloppy"}',
        b'{"mode": "strict"}',
        b'{"arguments": {}, "extra": 1}',
    ):
        broken = await validate(None, content=raw)
        assert broken.status_code == 400 and broken.json()["code"] == "invalid_request", (raw, broken.text)
        assert await events_of(db, broken) == []


async def test_arguments_nested_10000_deep_or_5_mib_are_rejected_cleanly(validate, db):
    deep = '{"a":' * 10_000 + "1" + "}" * 10_000
    body = ('{"arguments": ' + deep + "}").encode()
    as_body = await validate(None, content=body)
    assert as_body.status_code == 400 and as_body.json()["code"] == "invalid_request", as_body.text
    assert await events_of(db, as_body) == []
    arrays = ('{"arguments": {"x": ' + "[" * 10_000 + "]" * 10_000 + "}}").encode()
    assert (await validate(None, content=arrays)).status_code == 400

    as_text = await validate({"arguments": deep})
    assert as_text.status_code == 200 and as_text.json()["valid"] is False
    assert "nested deeper" in as_text.json()["errors"][0]["message"]

    moderately = {"arguments": json.loads('{"a":' * 100 + "1" + "}" * 100)}
    too_deep = await validate(moderately)
    assert too_deep.status_code == 200 and too_deep.json()["valid"] is False

    huge = json.dumps({"arguments": {"invoiceId": "x" * (5 * 1024 * 1024)}}).encode()
    too_large = await validate(None, content=huge)
    assert too_large.status_code == 413 and too_large.json()["code"] == "payload_too_large"
    huge_text = json.dumps({"arguments": "y" * (5 * 1024 * 1024)}).encode()
    assert (await validate(None, content=huge_text)).status_code == 413


async def test_validate_is_gated(client, mint, world, validate, db):
    anonymous = await client.post(
        path(world, "billing-agent", "invoice.lookup", "2.0.0", "/validate"), json={"arguments": {}}
    )
    assert anonymous.status_code == 401
    no_region = await validate({"arguments": {}}, headers=mint(world, "router", "invoice:read"))
    assert no_region.status_code == 403 and no_region.json()["code"] == "data_location_denied"
    assert [e["reason"] for e in await events_of(db, no_region)] == ["data_location_denied"]
    stranger = await client.post(
        path(world, "ledger-agent", "ledger.reverse-entry", "1.0.0", "/validate"),
        json={"arguments": {"entryId": "e-1"}},
        headers=mint("s" + world, "r", "ledger:write", regions=["eu"]),
    )
    assert stranger.status_code == 404 and "minLength" not in stranger.text


# --- the A2A extended card, through the a2a-sdk client -------------------------------------------


async def a2a_extended_card(client: httpx.AsyncClient, tenant: str, agent_id: str, headers: dict) -> AgentCard:
    """What an A2A client does: resolve the public card (with its token: a private agent's public card
    is visible only to callers who may see the agent), then ask for the extended card."""
    async with httpx.AsyncClient(transport=client._transport, base_url="http://registry.test") as http:
        resolver = A2ACardResolver(http, base_url=f"http://registry.test/v1/agents/{tenant}/{agent_id}")
        public = await resolver.get_agent_card(http_kwargs={"headers": dict(headers)})
        a2a = ClientFactory(ClientConfig(httpx_client=http, supported_protocol_bindings=["HTTP+JSON"])).create(public)
        context = ClientCallContext(service_parameters=dict(headers))
        return await a2a.get_extended_agent_card(GetExtendedAgentCardRequest(), context=context)


def capreg_extension(card: AgentCard) -> dict:
    [extension] = [e for e in card.capabilities.extensions if e.uri == CAPREG_EXTENSION_URI]
    return MessageToDict(extension.params)


async def test_extended_card_through_the_a2a_client(client, mint, world, db):
    caller = mint(world, "router", "invoice:read", regions=["eu"])
    card = await a2a_extended_card(client, world, "billing-agent", caller)
    validate_proto_required_fields(card)
    assert [s.id for s in card.skills] == ["invoice.lookup"]  # mark-paid needs invoice:write
    assert [i.url for i in card.supported_interfaces] == ["https://billing.acme.internal/a2a"]
    skills = capreg_extension(card)["skills"]
    assert list(skills) == ["invoice.lookup"]
    assert skills["invoice.lookup"]["inputSchema"] == BILLING["skills"][0]["inputSchema"]
    assert skills["invoice.lookup"]["outputSchema"] == BILLING["skills"][0]["outputSchema"]
    assert skills["invoice.lookup"]["version"] == "2.0.0"
    assert list(card.skills[0].examples) == ["look up invoice inv-2026-091"]

    events = await db.fetch(
        "SELECT type, ref, reason FROM audit_events WHERE actor_tenant = $1 AND ref LIKE $2 AND type LIKE 'detail.%' ORDER BY seq",
        world,
        f"{world}/billing-agent/%",
    )
    assert [tuple(e) for e in events] == [
        ("detail.released", f"{world}/billing-agent/invoice.lookup@2.0.0", None),
        ("detail.denied", f"{world}/billing-agent/invoice.mark-paid@1.1.0", "insufficient_scope"),
    ]

    both = await a2a_extended_card(
        client, world, "billing-agent", mint(world, "router", "invoice:read invoice:write", regions=["eu"])
    )
    assert [s.id for s in both.skills] == ["invoice.lookup", "invoice.mark-paid"]


async def test_extended_card_for_a_caller_that_passes_nothing(client, mint, world, db, settings):
    response = await client.get(
        f"/v1/agents/{world}/billing-agent/extendedAgentCard", headers=mint(world, "router", "", regions=["eu"])
    )
    assert response.status_code == 200, response.text
    raw = response.json()
    assert raw["skills"] == []
    assert raw["supportedInterfaces"] == [
        {
            "url": f"{registry_url(settings)}/v1/agents/{world}/billing-agent",
            "protocolBinding": binding,
            "protocolVersion": "1.0",
        }
        for binding in ("HTTP+JSON", "JSONRPC")
    ]
    for field in GATED:
        assert field not in response.text
    assert sorted(e["reason"] for e in await events_of(db, response)) == ["insufficient_scope", "insufficient_scope"]

    card = await a2a_extended_card(client, world, "billing-agent", mint(world, "router", "invoice:read"))
    assert list(card.skills) == [] and capreg_extension(card) == {"skills": {}}


async def test_extended_card_visibility_and_tokens(client, mint, world, other_tenant, db):
    shared = await a2a_extended_card(
        client, world, "ledger-agent", mint(other_tenant, "r", "ledger:write", regions=["us"])
    )
    assert [s.id for s in shared.skills] == ["ledger.reverse-entry"]
    assert capreg_extension(shared)["skills"]["ledger.reverse-entry"]["sideEffect"] == "destructive"

    url = f"/v1/agents/{world}/ledger-agent/extendedAgentCard"
    stranger = await client.get(url, headers=mint("s" + world, "r", "ledger:write", regions=["eu"]))
    missing = await client.get(
        f"/v1/agents/{world}/no-such-agent/extendedAgentCard", headers=mint("s" + world, "r", "ledger:write")
    )
    assert stranger.status_code == missing.status_code == 404
    assert without_trace(stranger) == without_trace(missing)
    [event] = await events_of(db, stranger)
    assert (event["type"], event["reason"], event["ref"]) == ("detail.denied", "not_found", f"{world}/ledger-agent")
    assert (await client.get(url)).status_code == 401
    # Through the A2A client: a public agent's extended card without a token is refused, and a
    # private agent's cards are not there for a stranger.
    with pytest.raises(A2AClientError, match="401"):
        await a2a_extended_card(client, world, "billing-agent", {})
    with pytest.raises(AgentCardResolutionError, match="404"):
        await a2a_extended_card(client, world, "ledger-agent", mint("s" + world, "r", "ledger:write"))


async def test_extended_card_parses_strictly_with_every_skill(client, mint, world):
    response = await client.get(
        f"/v1/agents/{world}/billing-agent/extendedAgentCard",
        headers=mint(world, "router", "invoice:read invoice:write", regions=["eu"]),
    )
    assert response.status_code == 200
    card = ParseDict(response.json(), AgentCard())  # strict: no unknown fields anywhere
    validate_proto_required_fields(card)
