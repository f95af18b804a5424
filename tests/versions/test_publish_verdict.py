"""registry.versions.compatibility.verdict: `publish_verdict` on its own, and the one verdict:
`POST /v1/compatibility` answers `compatible` exactly when publishing `new` after `old` with
`PUT /v1/agents/...` is accepted (pre-releases included), through a real `capreg serve`."""

from __future__ import annotations

import secrets

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from registry.versions.compatibility.verdict import publish_verdict
from registry.versions.semver import Version
from tests.conftest import capreg, example

V = Version.parse

VERSIONS = ["1.0.0", "1.0.1", "1.1.0", "2.0.0-rc.1", "2.0.0-rc.2", "2.0.0", "2.1.0-beta", "2.1.0", "3.0.0"]
SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "string"}}},
    {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
    {"type": "object", "properties": {"a": {"type": "string", "maxLength": 5}}},
    {"type": "object", "properties": {"a": {"type": ["string", "integer"]}}},
]
SIDE_EFFECTS = ["none", "write"]


def skill(version: str, schema: dict, side_effect: str, scopes: list[str]) -> dict:
    return {
        "id": "verdict.probe",
        "name": "Probe",
        "description": "A probe of the publishing verdict",
        "version": version,
        "inputSchema": schema,
        "sideEffect": side_effect,
        "scopes": scopes,
    }


skills = st.builds(
    skill,
    version=st.sampled_from(VERSIONS),
    schema=st.sampled_from(SCHEMAS),
    side_effect=st.sampled_from(SIDE_EFFECTS),
    scopes=st.sampled_from([["probe:read"], ["probe:read", "probe:write"]]),
)


@pytest.fixture(scope="module")
def publisher(live_server) -> tuple[str, dict, str]:
    base, env, _ = live_server
    tenant = "v" + secrets.token_hex(4)
    token = capreg(
        env, "token", "mint", "--tenant", tenant, "--sub", "ci", "--scope", "registry:publish"
    ).stdout.strip()
    return base, {"Authorization": f"Bearer {token}"}, tenant


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(old=skills, new=skills)
def test_the_compatibility_endpoint_agrees_with_publishing(publisher, old, new):
    base, headers, tenant = publisher
    if Version.parse(new["version"]) <= Version.parse(old["version"]):
        return  # the endpoint refuses such a pair as a malformed question (400)
    agent = "a" + secrets.token_hex(5)
    card = {**example("billing-agent.json"), "visibility": "tenant"}
    with httpx.Client(base_url=base, headers=headers, timeout=30) as http:
        first = http.put(f"/v1/agents/{tenant}/{agent}", json={**card, "skills": [old]})
        assert first.status_code == 201, first.text
        verdict = http.post("/v1/compatibility", json={"old": old, "new": new})
        assert verdict.status_code == 200, verdict.text
        published = http.put(f"/v1/agents/{tenant}/{agent}", json={**card, "skills": [new]})
        assert published.status_code in (201, 409), published.text
        assert verdict.json()["compatible"] == (published.status_code == 201), (verdict.json(), published.json())
        if published.status_code == 409:
            kinds = sorted(e["kind"] for e in published.json()["errors"])
            assert kinds == sorted(e["kind"] for e in verdict.json()["errors"])


def test_publish_verdict_compares_with_the_neighbouring_releases_of_the_major_line() -> None:
    required = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    loose = {"type": "object", "properties": {"a": {"type": "string"}}}

    def contract(schema):
        return {"inputSchema": schema, "outputSchema": {}, "scopes": [], "sideEffect": "none"}

    line = [(V(t), contract(loose)) for t in ["1.0.0", "2.0.0", "2.3.0", "2.5.0", "3.0.0-rc.1"]]
    # checked against 2.3.0 below and 2.5.0 above; a required property breaks callers of 2.3.0
    [found] = publish_verdict(V("2.4.0"), contract(required), line)
    assert (found.neighbour, found.above, found.change.kind) == (V("2.3.0"), False, "required_added")
    assert publish_verdict(V("2.4.0"), contract(loose), line) == []
    # a new major line, a pre-release, and a release whose only lower neighbour is a pre-release
    assert publish_verdict(V("4.0.0"), contract(required), line) == []
    assert publish_verdict(V("2.6.0-rc.1"), contract(required), line) == []
    assert publish_verdict(V("3.0.0"), contract(required), line) == []
    # the release above must stay compatible with the new one (2.5.0 accepts less than 2.4.0 would)
    stricter_above = [(V("2.3.0"), contract(required)), (V("2.5.0"), contract(required))]
    [above] = publish_verdict(V("2.4.0"), contract(loose), stricter_above)
    assert (above.neighbour, above.above) == (V("2.5.0"), True)
