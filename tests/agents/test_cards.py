"""A2A cards built from the example registrations parse with the official a2a-sdk and release
only what docs/api.md#agent-views-and-cards allows."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest
from a2a.types import AgentCard
from a2a.utils.proto_utils import validate_proto_required_fields
from google.protobuf.json_format import ParseDict

from registry.agents.cards import (
    CAPREG_EXTENSION_URI,
    a2a_card_dict,
    extended_agent_card,
    normalize_registration,
    public_agent_card,
)
from registry.core.records import AgentRegistration, CapabilityVersion, SkillRegistration

EXAMPLES = Path(__file__).parents[1] / "examples"
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.json"))
BASE_URL = "https://registry.example/v1/agents/acme/billing-agent"


def registration(path: Path) -> AgentRegistration:
    return msgspec.json.decode(path.read_bytes(), type=AgentRegistration)


def capability(tenant: str, agent_id: str, skill: SkillRegistration) -> CapabilityVersion:
    """A stored capability version for a registered skill, as publishing would store it."""
    return CapabilityVersion(
        tenant=tenant,
        agent_id=agent_id,
        id=skill.id,
        version=skill.version,
        name=skill.name,
        description=skill.description,
        tags=skill.tags,
        scopes=skill.scopes,
        side_effect=skill.side_effect,
        requires_approval=(
            skill.requires_approval if skill.requires_approval is not None else skill.side_effect == "destructive"
        ),
        data_regions=skill.data_regions,
        slo=skill.slo,
        examples=skill.examples,
        input_schema=skill.input_schema,
        output_schema=skill.output_schema,
        input_modes=skill.input_modes,
        output_modes=skill.output_modes,
        status="active",
        sunset_at=None,
        deprecation_message=None,
        effective_at=skill.effective_at,
        published_at=datetime(2026, 1, 1, tzinfo=UTC),
    )


def capabilities_of(path: Path) -> list[CapabilityVersion]:
    return [capability("acme", path.stem, skill) for skill in registration(path).skills]


def parsed_card(card: dict) -> AgentCard:
    """Parse strictly (unknown fields are errors) and check A2A's required fields."""
    message = ParseDict(card, AgentCard())
    validate_proto_required_fields(message)
    return message


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_stored_card_is_a_valid_a2a_card_without_registry_fields(path: Path) -> None:
    card = a2a_card_dict(registration(path))
    parsed_card(card)
    text = json.dumps(card)
    for registry_field in (
        "visibility",
        "sharedWith",
        "inputSchema",
        "outputSchema",
        "sideEffect",
        "scopes",
        "dataRegions",
    ):
        assert f'"{registry_field}"' not in text


def test_legacy_card_converts_to_one_interface_with_its_url_and_binding() -> None:
    reg = normalize_registration(registration(EXAMPLES / "legacy-0.3-search-agent.json"))
    assert [(i.url, i.protocol_binding, i.protocol_version) for i in reg.supported_interfaces] == [
        ("https://search.example.org/a2a", "JSONRPC", "0.3")
    ]
    assert (reg.url, reg.preferred_transport, reg.protocol_version) == (None, None, None)
    card = a2a_card_dict(reg)
    assert card["supportedInterfaces"] == [
        {"url": "https://search.example.org/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}
    ]
    assert "url" not in card and "protocolVersion" not in card


def test_legacy_fields_all_convert() -> None:
    body = {
        "protocolVersion": "0.3.0",
        "name": "Legacy",
        "description": "d",
        "version": "1.0.0",
        "url": "https://a.example/rpc",
        "preferredTransport": "GRPC",
        "additionalInterfaces": [
            {"url": "https://a.example/rpc", "transport": "GRPC"},
            {"url": "https://a.example/rest", "transport": "HTTP+JSON"},
        ],
        "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"},
            "key": {"type": "apiKey", "in": "header", "name": "X-Key"},
        },
        "security": [{"bearer": []}, {"key": ["read"]}],
        "supportsAuthenticatedExtendedCard": True,
        "capabilities": {"streaming": True, "stateTransitionHistory": True},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [
            {
                "id": "a.b",
                "name": "A",
                "description": "d",
                "tags": ["t"],
                "version": "1.0.0",
                "sideEffect": "none",
                "scopes": [],
            }
        ],
    }
    reg = normalize_registration(msgspec.convert(body, AgentRegistration))
    card = a2a_card_dict(reg)
    assert card["supportedInterfaces"] == [
        {"url": "https://a.example/rpc", "protocolBinding": "GRPC", "protocolVersion": "0.3"},
        {"url": "https://a.example/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "0.3"},
    ]
    assert card["securityRequirements"] == [
        {"schemes": {"bearer": {"list": []}}},
        {"schemes": {"key": {"list": ["read"]}}},
    ]
    assert card["securitySchemes"] == {
        "bearer": {"httpAuthSecurityScheme": {"scheme": "bearer", "bearerFormat": "JWT"}},
        "key": {"apiKeySecurityScheme": {"location": "header", "name": "X-Key"}},
    }
    assert card["capabilities"] == {"streaming": True, "extendedAgentCard": True}
    parsed = parsed_card(card)
    assert list(parsed.security_requirements[1].schemes["key"].list) == ["read"]


def test_a2a_1_0_registration_passes_unchanged() -> None:
    reg = registration(EXAMPLES / "billing-agent.json")
    assert normalize_registration(reg) is reg


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_public_card_is_valid_and_releases_no_detail(path: Path) -> None:
    reg = normalize_registration(registration(path))
    caps = capabilities_of(path)
    card = public_agent_card(a2a_card_dict(reg), caps, base_url=BASE_URL + "/")
    parsed = parsed_card(card)

    text = json.dumps(card)
    for secret in ("inputSchema", "outputSchema", "examples", "scopes", "sideEffect", "dataRegions"):
        assert f'"{secret}"' not in text
    for interface in reg.supported_interfaces:
        assert interface.url not in text
    assert [(i.url, i.protocol_binding, i.protocol_version, i.tenant) for i in parsed.supported_interfaces] == [
        (BASE_URL, "HTTP+JSON", "1.0", ""),
        (BASE_URL, "JSONRPC", "1.0", ""),
    ]
    assert parsed.capabilities.extended_agent_card is True
    scheme = parsed.security_schemes["capreg"].http_auth_security_scheme
    assert (scheme.scheme, scheme.bearer_format) == ("Bearer", "JWT")
    assert "capreg" in parsed.security_requirements[0].schemes
    assert [s.id for s in parsed.skills] == [c.id for c in caps]
    assert parsed.name == reg.name and parsed.version == reg.version


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_extended_card_carries_schemas_and_real_interfaces(path: Path) -> None:
    reg = normalize_registration(registration(path))
    caps = capabilities_of(path)
    card = extended_agent_card(a2a_card_dict(reg), caps, base_url=BASE_URL)
    parsed = parsed_card(card)

    assert [(i.url, i.protocol_binding) for i in parsed.supported_interfaces] == [
        (i.url, i.protocol_binding) for i in reg.supported_interfaces
    ]
    [extension] = [e for e in card["capabilities"]["extensions"] if e["uri"] == CAPREG_EXTENSION_URI]
    released = extension["params"]["skills"]
    assert set(released) == {c.id for c in caps}
    for cap in caps:
        assert released[cap.id]["version"] == cap.version
        assert released[cap.id]["inputSchema"] == cap.input_schema
        assert released[cap.id]["outputSchema"] == cap.output_schema
        assert released[cap.id]["scopes"] == cap.scopes
        assert released[cap.id]["sideEffect"] == cap.side_effect
        assert released[cap.id]["requiresApproval"] == cap.requires_approval
    skill_examples = {s.id: list(s.examples) for s in parsed.skills}
    assert skill_examples == {c.id: c.examples for c in caps}


def test_extended_card_lists_only_the_given_skills() -> None:
    path = EXAMPLES / "billing-agent.json"
    reg = registration(path)
    lookup = [c for c in capabilities_of(path) if c.id == "invoice.lookup"]
    card = extended_agent_card(a2a_card_dict(reg), lookup, base_url=BASE_URL)
    parsed_card(card)
    assert [s["id"] for s in card["skills"]] == ["invoice.lookup"]
    assert "invoice.mark-paid" not in json.dumps(card)


def test_card_refuses_two_versions_of_one_skill() -> None:
    path = EXAMPLES / "billing-agent.json"
    caps = capabilities_of(path)
    with pytest.raises(ValueError, match="listed twice"):
        public_agent_card(a2a_card_dict(registration(path)), caps + caps[:1], base_url=BASE_URL)


def test_public_card_stays_valid_for_a_skill_without_tags_or_description() -> None:
    path = EXAMPLES / "billing-agent.json"
    cap = msgspec.structs.replace(capabilities_of(path)[0], tags=[], description="")
    card = public_agent_card(a2a_card_dict(registration(path)), [cap], base_url=BASE_URL)
    parsed_card(card)
    assert card["skills"][0]["tags"] == ["invoice"]
