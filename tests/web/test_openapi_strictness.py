"""The OpenAPI document is as strict as the validation (registry.web.openapi_strict), and OPTIONS answers
every method served at a path (registry.web.route_methods): for every path and every request body the
document has, not a list of known cases."""

from __future__ import annotations

import json
import re

import msgspec
import pytest

import registry.app  # noqa: F401  (every route module, so every request Struct, is imported)
from registry.web.openapi_strict import _structs
from tests.conftest import ROOT

DOCUMENT = json.loads((ROOT / "openapi" / "openapi.json").read_text())
COMPONENTS = DOCUMENT["components"]["schemas"]
_SAMPLE = {
    "tenant": "acme",
    "agent_id": "billing-agent",
    "skill_id": "invoice.lookup",
    "version": "1.0.0",
    "approval_id": "a1",
    "jti": "j1",
    "identifier": "urn:air:acme.capreg.invalid:billing-agent",
}


def _request_bodies() -> list[str]:
    names = []
    for operations in DOCUMENT["paths"].values():
        for operation in operations.values():
            schema = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
            if "$ref" in schema:
                names.append(schema["$ref"].rsplit("/", 1)[-1])
    return sorted(set(names))


@pytest.mark.parametrize("name", _request_bodies())
def test_each_request_body_is_documented_as_its_decoder_checks_it(name):
    """The component is msgspec's own rendering of the Struct the handler decodes with, so unknown
    fields (forbid_unknown_fields), item patterns and lengths, and bounds beside null all show."""
    cls = _structs()[name]
    _, rendered = msgspec.json.schema_components([cls], ref_template="#/components/schemas/{name}")

    def without_formats(text: str) -> str:  # formats msgspec leaves out are taken from litestar's rendering
        return re.sub(r'"format": "[^"]*", ', "", text)

    assert without_formats(json.dumps(COMPONENTS[name], sort_keys=True)) == without_formats(
        json.dumps(rendered[name], sort_keys=True)
    )
    if cls.__struct_config__.forbid_unknown_fields:
        assert COMPONENTS[name]["additionalProperties"] is False


def test_what_litestar_lost_is_in_the_document():
    heartbeat = COMPONENTS["Heartbeat"]
    assert heartbeat["additionalProperties"] is False
    assert {"minimum": 0, "maximum": 1, "type": "number"} in heartbeat["properties"]["load"]["anyOf"]
    shared_with = COMPONENTS["AgentRegistration"]["properties"]["sharedWith"]
    assert "pattern" in shared_with["items"]
    side_effect = next(
        p for p in DOCUMENT["paths"]["/v1/capabilities"]["get"]["parameters"] if p["name"] == "sideEffectMax"
    )
    assert "destructive" in json.dumps(side_effect["schema"]["enum"])


async def test_options_lists_every_documented_method_of_every_path(client):
    for path, operations in DOCUMENT["paths"].items():
        url = re.sub(r"\{(\w+)\}", lambda m: _SAMPLE[m[1]], path)
        response = await client.options(url)
        assert response.status_code == 204, (path, response.status_code)
        allowed = {method.strip() for method in response.headers["allow"].split(",")}
        documented = {method.upper() for method in operations}
        assert documented | {"OPTIONS"} <= allowed, (path, allowed, documented)
        assert allowed - {"OPTIONS", "HEAD"} <= documented, (path, allowed, documented)
