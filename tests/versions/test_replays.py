"""Behaviour fixtures and the replay gate (docs/api.md#behaviour-fixtures-and-the-replay-gate): fixtures
checked against the version's own schemas, immutable, released as examples are; a version whose
baseline has fixtures stored as a candidate, invisible everywhere but to its own tenant's exact
requests; the judge releasing it on a passing report and refusing a failing one; the verdicts."""

from __future__ import annotations

import copy
import json

from tests.conftest import count_rows, example

BILLING = example("billing-agent.json")
LOOKUP = BILLING["skills"][0]
SKILL = "invoice.lookup"

UNPAID = {
    "name": "unpaid-invoice",
    "input": {"invoiceId": "inv-2026-091"},
    "expect": {
        "outcome": "ok",
        "sideEffect": "none",
        "output": {"invoiceId": "inv-2026-091", "status": "open", "totalCents": 1299, "currency": "EUR"},
    },
}
UNKNOWN = {
    "name": "unknown-invoice",
    "input": {"invoiceId": "inv-0000-000"},
    "expect": {"outcome": "not_found", "sideEffect": "none"},
}


def lookup(version: str, fixtures: list | None = None, **changes) -> dict:
    skill = copy.deepcopy(LOOKUP)
    skill["version"] = version
    if fixtures is not None:
        skill["fixtures"] = copy.deepcopy(fixtures)
    skill.update(changes)
    return skill


def card(*skills: dict) -> dict:
    return {**copy.deepcopy(BILLING), "skills": list(skills)}


async def put(client, mint, tenant, body):
    return await client.put(
        f"/v1/agents/{tenant}/billing-agent", json=body, headers=mint(tenant, "p", "registry:publish")
    )


def version_path(tenant: str, version: str) -> str:
    return f"/v1/agents/{tenant}/billing-agent/skills/{SKILL}/versions/{version}"


def reader(mint, tenant, scopes: str = "registry:read invoice:read"):
    return mint(tenant, "router", scopes, regions=["eu"])


def passing_report() -> dict:
    return {
        "results": [
            {
                "fixture": "unpaid-invoice",
                "outcome": "ok",
                "sideEffect": "none",
                "durationMs": 41,
                "output": {
                    "invoiceId": "inv-2026-091",
                    "status": "open",
                    "totalCents": 1299,
                    "currency": "EUR",
                    "lines": [],
                    "dueAt": None,
                },
            },
            {"fixture": "unknown-invoice", "outcome": "not_found", "sideEffect": "none"},
            {"fixture": "not-in-the-baseline", "outcome": "boom", "sideEffect": "destructive"},
        ],
        "instance": "i-1",
    }


async def with_candidate(client, mint, tenant) -> dict:
    """2.0.0 with two fixtures, then 2.1.0 (same schemas): the candidate."""
    assert (await put(client, mint, tenant, card(lookup("2.0.0", [UNPAID, UNKNOWN])))).status_code == 201
    output_schema = copy.deepcopy(LOOKUP["outputSchema"])
    output_schema["properties"]["lines"] = {"type": "array"}  # promises more: compatible
    response = await put(
        client, mint, tenant, card(lookup("2.0.0", [UNPAID, UNKNOWN]), lookup("2.1.0", outputSchema=output_schema))
    )
    assert response.status_code == 201, response.text
    return response.json()


async def feed_head(client) -> int:
    """The change feed's current position (the suite's earlier tests may have written thousands)."""
    position = 0
    while True:
        page = (await client.get("/v1/changes", params={"after": position, "wait": 0, "limit": 1000})).json()
        if not page["items"]:
            return position
        position = page["next"]


async def events(db, tenant: str, type_: str) -> list[dict]:
    rows = await db.fetch(
        "SELECT type, outcome, reason, ref, actor FROM audit_events WHERE tenant = $1 AND type = $2 ORDER BY seq",
        tenant,
        type_,
    )
    return [dict(r) for r in rows]


# --- Fixtures on PUT -------------------------------------------------------------------------------


async def test_fixtures_that_do_not_fit_the_schemas_are_400_with_pointers(client, mint, tenant, db):
    bad_input = {**UNPAID, "name": "bad-input", "input": {"invoiceId": 7}}
    bad_output = {
        **UNPAID,
        "name": "bad-output",
        "expect": {**UNPAID["expect"], "output": {**UNPAID["expect"]["output"], "status": "lost"}},
    }
    too_risky = {**UNKNOWN, "name": "too-risky", "expect": {"outcome": "ok", "sideEffect": "write"}}
    body = card(lookup("2.0.0", [UNPAID, bad_input, bad_output, too_risky, {**UNKNOWN, "name": "unpaid-invoice"}]))
    response = await put(client, mint, tenant, body)
    assert response.status_code == 400, response.text
    problem = response.json()
    assert problem["code"] == "invalid_request"
    paths = {e["path"] for e in problem["errors"]}
    assert paths == {
        "/skills/0/fixtures/1/input",
        "/skills/0/fixtures/2/expect/output",
        "/skills/0/fixtures/3/expect/sideEffect",
        "/skills/0/fixtures/4/name",
    }, problem["errors"]
    assert all(e["message"] for e in problem["errors"])
    assert await count_rows(db, "capability_versions", tenant=tenant) == 0


async def test_fixture_count_size_and_shape_are_bounded(client, mint, tenant, db):
    many = [{**UNKNOWN, "name": f"f-{i}"} for i in range(101)]
    response = await put(client, mint, tenant, card(lookup("2.0.0", many)))
    assert response.status_code == 400 and response.json()["errors"][0]["path"] == "/skills/0/fixtures", response.text

    big = {
        **UNKNOWN,
        "input": {"invoiceId": "inv-2026-091", "includeLines": False},
        "expect": {**UNKNOWN["expect"], "output": {"x": "y" * 70_000}},
    }
    response = await put(client, mint, tenant, card(lookup("2.0.0", [big])))
    assert response.status_code == 400 and response.json()["errors"][0]["path"] == "/skills/0/fixtures/0", response.text

    for broken, path in [
        ({**UNKNOWN, "name": "Not A Name"}, "/skills/0/fixtures/0/name"),
        ({**UNKNOWN, "expect": {"outcome": "ok"}}, "/skills/0/fixtures/0/expect"),
        ({**UNKNOWN, "expect": {**UNKNOWN["expect"], "surprise": 1}}, "/skills/0/fixtures/0/expect"),
    ]:
        response = await put(client, mint, tenant, card(lookup("2.0.0", [broken])))
        assert response.status_code == 400, response.text
        assert response.json()["errors"][0]["path"].startswith(path), response.json()
    assert await count_rows(db, "capability_versions", tenant=tenant) == 0


async def test_fixtures_are_immutable_content_released_as_examples_are(client, mint, tenant, other_tenant):
    body = card(lookup("2.0.0", [UNPAID]))
    assert (await put(client, mint, tenant, body)).status_code == 201
    again = await put(client, mint, tenant, body)
    assert again.status_code == 200 and again.json()["unchanged"] == [{"id": SKILL, "version": "2.0.0"}]
    changed = await put(client, mint, tenant, card(lookup("2.0.0", [UNPAID, UNKNOWN])))
    assert changed.status_code == 409 and changed.json()["code"] == "version_conflict", changed.text
    dropped = await put(client, mint, tenant, card(lookup("2.0.0")))
    assert dropped.status_code == 409 and dropped.json()["code"] == "version_conflict"

    detail = (await client.get(version_path(tenant, "2.0.0"), headers=reader(mint, other_tenant))).json()
    assert detail["fixtures"] == [UNPAID] and detail["examples"] == LOOKUP["examples"]
    tool = (
        await client.get(
            version_path(tenant, "2.0.0") + "/tool", params={"format": "mcp"}, headers=reader(mint, other_tenant)
        )
    ).json()
    assert tool["_meta"]["dev.capreg/fixtures"] == [UNPAID]
    extended = (
        await client.get(f"/v1/agents/{tenant}/billing-agent/extendedAgentCard", headers=reader(mint, other_tenant))
    ).json()
    [extension] = [e for e in extended["capabilities"]["extensions"] if e["uri"].startswith("https://capreg.dev/")]
    assert extension["params"]["skills"][SKILL]["fixtures"] == [UNPAID]

    found = await client.get("/v1/capabilities", params={"tenant": tenant, "versions": "all"})
    assert found.status_code == 200 and "fixtures" not in found.text and "unpaid-invoice" not in found.text
    public_card = await client.get(f"/v1/agents/{tenant}/billing-agent/.well-known/agent-card.json")
    assert "unpaid-invoice" not in public_card.text


async def test_a_version_without_fixtures_keeps_its_content_hash(client, mint, tenant):
    """Registrations sent before fixtures existed stay unchanged when sent again."""
    assert (await put(client, mint, tenant, card(lookup("2.0.0")))).status_code == 201
    explicit = await put(client, mint, tenant, card(lookup("2.0.0", [])))
    assert explicit.status_code == 200 and explicit.json()["unchanged"] == [{"id": SKILL, "version": "2.0.0"}]


# --- Candidates ------------------------------------------------------------------------------------


async def test_a_new_version_of_a_baseline_with_fixtures_is_a_candidate(client, mint, tenant, db):
    start = await feed_head(client)
    answer = await with_candidate(client, mint, tenant)
    assert answer["published"] == []
    assert answer["candidates"] == [{"id": SKILL, "version": "2.1.0", "baseline": "2.0.0", "fixtures": 2}]
    published = await events(db, tenant, "version.published")
    assert [(e["ref"].rsplit("@", 1)[1], e["reason"]) for e in published] == [("2.0.0", None), ("2.1.0", "candidate")]

    own = reader(mint, tenant)
    # Invisible to discovery, latest, ranges, cards, the agent view and the change feed, even to its tenant.
    for headers in ({}, own):
        items = (
            await client.get(
                "/v1/capabilities", params={"tenant": tenant, "versions": "all", "skill": SKILL}, headers=headers
            )
        ).json()["items"]
        assert [i["version"] for i in items] == ["2.0.0"]
        latest = (
            await client.get("/v1/capabilities", params={"tenant": tenant, "skill": SKILL}, headers=headers)
        ).json()["items"]
        assert [i["version"] for i in latest] == ["2.0.0"]
        view = (await client.get(f"/v1/agents/{tenant}/billing-agent", headers=headers)).json()
        assert [s["version"] for s in view["skills"] if s["id"] == SKILL] == ["2.0.0"]
        public_card = await client.get(
            f"/v1/agents/{tenant}/billing-agent/.well-known/agent-card.json", headers=headers
        )
        assert "2.1.0" not in public_card.text
        changes = (await client.get("/v1/changes", params={"after": start, "limit": 1000}, headers=headers)).json()[
            "items"
        ]
        assert not [c for c in changes if c["ref"] == f"{tenant}/billing-agent/{SKILL}@2.1.0"] and [
            c for c in changes if c["ref"] == f"{tenant}/billing-agent/{SKILL}@2.0.0"
        ]
    for requested in ("latest", "^2", "~2.1", ">=2.1.0,<3"):
        response = await client.get(version_path(tenant, requested), headers=own)
        if requested in ("latest", "^2"):
            assert response.json()["version"] == "2.0.0", (requested, response.text)
        else:
            assert response.status_code == 404, (requested, response.text)
    extended = (await client.get(f"/v1/agents/{tenant}/billing-agent/extendedAgentCard", headers=own)).json()
    [extension] = [e for e in extended["capabilities"]["extensions"] if e["uri"].startswith("https://capreg.dev/")]
    assert extension["params"]["skills"][SKILL]["version"] == "2.0.0"
    mcp = await client.post(
        "/mcp",
        headers={**own, "Accept": "application/json, text/event-stream"},
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "search_capabilities", "arguments": {"q": SKILL, "limit": 200}},
        },
    )
    items = mcp.json()["result"]["structuredContent"]["items"]
    assert [i["version"] for i in items if i["tenant"] == tenant and i["id"] == SKILL] == ["2.0.0"]


async def test_a_candidate_is_reachable_by_exact_version_for_its_own_tenant_only(
    client, mint, tenant, other_tenant, db
):
    await with_candidate(client, mint, tenant)
    own, other = reader(mint, tenant), reader(mint, other_tenant)
    detail = await client.get(version_path(tenant, "2.1.0"), headers=own)
    assert detail.status_code == 200 and detail.json()["status"] == "candidate", detail.text
    assert (
        await client.get(version_path(tenant, "2.1.0") + "/tool", params={"format": "openai"}, headers=own)
    ).status_code == 200
    valid = await client.post(
        version_path(tenant, "2.1.0") + "/validate", json={"arguments": {"invoiceId": "inv-2026-091"}}, headers=own
    )
    assert valid.status_code == 200 and valid.json()["valid"] is True
    listing = (await client.get(f"/v1/agents/{tenant}/billing-agent/skills/{SKILL}/versions", headers=own)).json()[
        "items"
    ]
    assert [(i["version"], i["status"]) for i in listing] == [("2.1.0", "candidate"), ("2.0.0", "active")]
    ticket = {"audience": f"{tenant}/billing-agent", "skill": SKILL, "scopes": ["invoice:read"], "ttlSeconds": 60}
    granted = await client.post("/v1/tickets", json={**ticket, "version": "2.1.0"}, headers=own)
    assert granted.status_code == 201, granted.text

    # Another tenant (the agent is public): the candidate does not exist.
    before = await count_rows(db, "audit_events", actor_tenant=other_tenant)
    for response in [
        await client.get(version_path(tenant, "2.1.0"), headers=other),
        await client.get(version_path(tenant, "2.1.0") + "/tool", params={"format": "mcp"}, headers=other),
        await client.post(version_path(tenant, "2.1.0") + "/validate", json={"arguments": {}}, headers=other),
        await client.post("/v1/tickets", json={**ticket, "version": "2.1.0"}, headers=other),
    ]:
        assert response.status_code == 404 and response.json()["code"] == "not_found", response.text
    listing = (await client.get(f"/v1/agents/{tenant}/billing-agent/skills/{SKILL}/versions", headers=other)).json()[
        "items"
    ]
    assert [i["version"] for i in listing] == ["2.0.0"]
    # Denials are audited, and name nothing the caller could not have written itself.
    # (one entry per chain: the caller's own chain holds each of its events once)
    denied = await db.fetch(
        "SELECT type, ref, scopes FROM audit_events WHERE actor_tenant = $1 AND chain = $1 AND outcome = 'denied'",
        other_tenant,
    )
    assert sorted(r["type"] for r in denied) == ["detail.denied"] * 3 + ["ticket.denied"]
    assert await count_rows(db, "audit_events", actor_tenant=other_tenant) > before
    assert all(list(r["scopes"]) == [] for r in denied if r["type"] == "detail.denied")


# --- The judge -------------------------------------------------------------------------------------


async def test_a_failing_report_is_422_and_a_passing_one_releases_the_candidate(client, mint, tenant, other_tenant, db):
    await with_candidate(client, mint, tenant)
    attest = mint(tenant, "ci", "registry:attest")
    replays = version_path(tenant, "2.1.0") + "/replays"
    start = await feed_head(client)

    marked = passing_report()
    marked["results"][0]["sideEffect"] = "write"  # "looks up and marks": every schema unchanged
    marked["results"][1]["outcome"] = "ok"
    response = await client.post(replays, json=marked, headers=attest)
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["code"] == "replay_failed"
    assert [(e["fixture"], e["kind"]) for e in problem["errors"]] == [
        ("unpaid-invoice", "side_effect"),
        ("unknown-invoice", "outcome"),
    ]
    missing = await client.post(replays, json={"results": []}, headers=attest)
    assert [(e["fixture"], e["kind"]) for e in missing.json()["errors"]] == [
        ("unpaid-invoice", "missing"),
        ("unknown-invoice", "missing"),
    ]
    wrong = passing_report()
    wrong["results"][0]["output"]["status"] = "paid"
    response = await client.post(replays, json=wrong, headers=attest)
    assert [(e["fixture"], e["kind"]) for e in response.json()["errors"]] == [("unpaid-invoice", "output")]
    schema_broken = passing_report()
    schema_broken["results"][0]["output"]["lines"] = "none"  # contains the expectation, breaks 2.1.0's outputSchema
    response = await client.post(replays, json=schema_broken, headers=attest)
    assert [(e["fixture"], e["kind"]) for e in response.json()["errors"]] == [("unpaid-invoice", "output")]
    assert (await client.get(version_path(tenant, "2.1.0"), headers=reader(mint, tenant))).json()[
        "status"
    ] == "candidate"

    passed = await client.post(replays, json=passing_report(), headers=attest)
    assert passed.status_code == 200, passed.text
    assert passed.json()["verdict"] == "passed" and passed.json()["version"]["status"] == "active"
    assert passed.json()["version"]["version"] == "2.1.0"
    latest = (await client.get("/v1/capabilities", params={"tenant": tenant, "skill": SKILL})).json()["items"]
    assert [i["version"] for i in latest] == ["2.1.0"]
    assert (await client.get(version_path(tenant, "latest"), headers=reader(mint, other_tenant))).json()[
        "version"
    ] == "2.1.0"
    changes = (await client.get("/v1/changes", params={"after": start, "limit": 1000})).json()["items"]
    assert [c["kind"] for c in changes if c["ref"] == f"{tenant}/billing-agent/{SKILL}@2.1.0"] == ["version.published"]

    again = await client.post(replays, json=passing_report(), headers=attest)
    assert again.status_code == 409 and again.json()["code"] == "not_candidate"
    not_gated = await client.post(version_path(tenant, "2.0.0") + "/replays", json=passing_report(), headers=attest)
    assert not_gated.status_code == 409 and not_gated.json()["code"] == "not_candidate"

    replayed = await events(db, tenant, "version.replayed")
    assert [(e["outcome"], e["reason"]) for e in replayed] == [("denied", "replay_failed")] * 4 + [
        ("allowed", None),
        ("denied", "not_candidate"),
        ("denied", "not_candidate"),
    ]
    assert {e["actor"] for e in replayed} == {"ci"}

    listed = await client.get(replays, headers=mint(tenant, "dev", "registry:read"))
    assert listed.status_code == 200, listed.text
    items = listed.json()["items"]
    assert [i["verdict"] for i in items] == ["passed", "failed", "failed", "failed", "failed"]
    assert items[0]["errors"] == [] and items[0]["actor"] == "ci" and items[0]["at"]
    assert items[-1]["errors"][0] == {
        "fixture": "unpaid-invoice",
        "kind": "side_effect",
        "message": items[-1]["errors"][0]["message"],
    }


async def test_replays_are_own_tenant_attest_only_and_bounded(client, mint, tenant, other_tenant, db):
    await with_candidate(client, mint, tenant)
    replays = version_path(tenant, "2.1.0") + "/replays"
    other = await client.post(
        replays, json=passing_report(), headers=mint(other_tenant, "ci", "registry:attest registry:read")
    )
    assert other.status_code == 404 and other.json()["code"] == "not_found"
    assert (await client.get(replays, headers=mint(other_tenant, "ci", "registry:read"))).status_code == 404
    no_scope = await client.post(
        replays, json=passing_report(), headers=mint(tenant, "ci", "registry:publish registry:admin")
    )
    assert no_scope.status_code == 403 and no_scope.json()["code"] == "insufficient_scope"
    assert no_scope.json()["missingScopes"] == ["registry:attest"]
    assert (await client.post(replays, json=passing_report())).status_code == 401
    assert (await client.get(replays, headers=mint(tenant, "ci", "registry:attest"))).status_code == 403
    missing = await client.post(
        version_path(tenant, "9.9.9") + "/replays", json=passing_report(), headers=mint(tenant, "ci", "registry:attest")
    )
    assert missing.status_code == 404

    attest = mint(tenant, "ci", "registry:attest")
    flood = {"results": [{"fixture": f"f-{i}", "outcome": "ok", "sideEffect": "none"} for i in range(10_000)]}
    response = await client.post(
        replays, content=json.dumps(flood), headers={**attest, "Content-Type": "application/json"}
    )
    assert response.status_code in (400, 413) and response.json()["code"] in ("invalid_request", "payload_too_large"), (
        response.text
    )
    flood = {"results": [{"fixture": f"f-{i}", "outcome": "ok", "sideEffect": "none"} for i in range(1001)]}
    response = await client.post(replays, json=flood, headers=attest)
    assert response.status_code == 400 and response.json()["errors"][0]["path"] == "/results", response.text
    deep: object = "x"
    for _ in range(100):
        deep = {"a": deep}
    nested = passing_report()
    nested["results"][0]["output"] = deep
    response = await client.post(replays, json=nested, headers=attest)
    assert response.status_code == 400 and response.json()["errors"][0]["path"] == "/results/0/output", response.text
    twice = passing_report()
    twice["results"].append(twice["results"][0])
    response = await client.post(replays, json=twice, headers=attest)
    assert response.status_code == 400 and response.json()["errors"][0]["path"] == "/results/3/fixture", response.text
    assert await count_rows(db, "capability_replays", tenant=tenant) == 0
    assert (await client.get(version_path(tenant, "2.1.0"), headers=reader(mint, tenant))).json()[
        "status"
    ] == "candidate"


async def test_a_candidate_can_be_retired_and_not_deprecated(client, mint, tenant, db):
    await with_candidate(client, mint, tenant)
    start = await feed_head(client)
    admin = mint(tenant, "admin", "registry:admin")
    deprecated = await client.post(version_path(tenant, "2.1.0") + "/deprecate", json={}, headers=admin)
    assert deprecated.status_code == 409, deprecated.text
    retired = await client.post(version_path(tenant, "2.1.0") + "/retire", headers=admin)
    assert retired.status_code == 200 and retired.json()["status"] == "retired"
    changes = (
        await client.get("/v1/changes", params={"after": start, "limit": 1000}, headers=reader(mint, tenant))
    ).json()["items"]
    assert not [c for c in changes if c["ref"] == f"{tenant}/billing-agent/{SKILL}@2.1.0"]
    response = await client.post(
        version_path(tenant, "2.1.0") + "/replays", json=passing_report(), headers=mint(tenant, "ci", "registry:attest")
    )
    assert response.status_code == 409 and response.json()["code"] == "not_candidate"


async def test_without_fixtures_on_the_baseline_a_new_version_is_published(client, mint, tenant):
    assert (await put(client, mint, tenant, card(lookup("2.0.0")))).status_code == 201
    answer = (await put(client, mint, tenant, card(lookup("2.0.0"), lookup("2.1.0", [UNPAID])))).json()
    assert answer["published"] == [{"id": SKILL, "version": "2.1.0"}] and answer["candidates"] == []
    # 2.1.0 has fixtures now: 2.2.0 is judged by them; a new major line is not.
    answer = (
        await put(
            client, mint, tenant, card(lookup("2.0.0"), lookup("2.1.0", [UNPAID]), lookup("2.2.0"), lookup("3.0.0"))
        )
    ).json()
    assert answer["published"] == [{"id": SKILL, "version": "3.0.0"}]
    assert answer["candidates"] == [{"id": SKILL, "version": "2.2.0", "baseline": "2.1.0", "fixtures": 1}]
    # A candidate is never the baseline: 2.3.0 is still judged by 2.1.0's fixtures.
    answer = (await put(client, mint, tenant, card(lookup("2.3.0")))).json()
    assert answer["candidates"] == [{"id": SKILL, "version": "2.3.0", "baseline": "2.1.0", "fixtures": 1}]
