"""registry.versions.service through `POST /v1/compatibility`: two skills that cannot be compared are
400 `invalid_request` with every problem located (versions, then schemas), `new` must be above `old`,
and the answer shapes the verdict publishing would give (`errors` refuse it, `breakingChanges` are
all found, also across a major bump)."""

from __future__ import annotations

from typing import Any

OBJECT = {"type": "object", "properties": {"a": {"type": "string"}}}
REQUIRED = {**OBJECT, "required": ["a"]}


def skill(version: str, input_schema: Any = OBJECT, output_schema: Any = None) -> dict:
    body = {
        "id": "probe",
        "name": "Probe",
        "description": "A probe of the compatibility endpoint",
        "version": version,
        "inputSchema": input_schema,
        "sideEffect": "none",
        "scopes": ["probe:read"],
    }
    if output_schema is not None:
        body["outputSchema"] = output_schema
    return body


async def compare(client, mint, tenant: str, old: dict, new: dict):
    return await client.post(
        "/v1/compatibility", json={"old": old, "new": new}, headers=mint(tenant, "ci", "registry:read")
    )


async def test_every_problem_is_located_versions_first(client, mint, tenant):
    answer = await compare(
        client, mint, tenant, skill("one", {"type": "string"}), skill("2.x", OBJECT, {"type": "nope"})
    )
    assert answer.status_code == 400, answer.text
    body = answer.json()
    assert (body["code"], body["detail"]) == ("invalid_request", "both skills must be valid registrations")
    paths = [e["path"] for e in body["errors"]]
    assert paths[:3] == ["/old/version", "/new/version", "/old/inputSchema/type"]
    assert paths[3:] and all(path.startswith("/new/outputSchema") for path in paths[3:])
    assert body["errors"][0]["message"].startswith("'one' is not a semantic version: write MAJOR.MINOR.PATCH")


async def test_new_must_be_above_old(client, mint, tenant):
    for old, new in (("1.2.0", "1.2.0"), ("2.0.0", "1.9.0"), ("1.0.0", "1.0.0-rc.1")):
        answer = await compare(client, mint, tenant, skill(old), skill(new))
        assert answer.status_code == 400, answer.text
        assert answer.json()["detail"] == "new must be a higher version than old"
        assert answer.json()["errors"] == [{"path": "/new/version", "message": f"{new} is not above {old}"}]


async def test_the_verdict_is_publishings(client, mint, tenant):
    refused = (await compare(client, mint, tenant, skill("1.0.0"), skill("1.1.0", REQUIRED))).json()
    assert refused["compatible"] is False
    assert [(e["kind"], e["path"]) for e in refused["errors"]] == [("required_added", "/inputSchema/properties/a")]
    assert refused["breakingChanges"] == refused["errors"]
    major = (await compare(client, mint, tenant, skill("1.0.0"), skill("2.0.0", REQUIRED))).json()
    assert (major["compatible"], major["errors"]) == (True, [])
    assert [e["kind"] for e in major["breakingChanges"]] == ["required_added"]
    same = (await compare(client, mint, tenant, skill("1.0.0"), skill("1.0.1"))).json()
    assert same == {"compatible": True, "errors": [], "breakingChanges": []}
