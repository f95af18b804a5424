"""A2A cards and tool definitions: what a registration becomes when it leaves the registry.

Owns the conversion of A2A 0.3 registrations to 1.0, the stored A2A card (the registration
without registry fields), the public and extended cards served per agent, and the OpenAI and
MCP tool definitions of a capability version. Pure functions over plain values: no I/O.

Every card built here parses into `a2a.types.AgentCard` with `google.protobuf.json_format.ParseDict`
(no unknown fields), so its keys are the proto JSON names of A2A 1.0.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import msgspec

from registry.core.records import AgentInterface, AgentRegistration, CapabilityVersion

CAPREG_EXTENSION_URI = "https://capreg.dev/extensions/capability/v1"
# The `_meta` key of an MCP tool definition carrying the capability's behaviour fixtures.
CAPREG_FIXTURES_META = "dev.capreg/fixtures"
CAPREG_SECURITY_SCHEME = "capreg"
PUBLIC_PROTOCOL_BINDING = "HTTP+JSON"
PUBLIC_PROTOCOL_VERSION = "1.0"
# The registry also answers A2A's JSON-RPC binding at the same URL (registry.a2a.rpc): the binding
# a2a-sdk's default client speaks. HTTP+JSON stays first, as before.
PUBLIC_PROTOCOL_BINDINGS = (PUBLIC_PROTOCOL_BINDING, "JSONRPC")

LEGACY_DEFAULT_TRANSPORT = "JSONRPC"
LEGACY_DEFAULT_PROTOCOL_VERSION = "0.3"

# A2A 1.0 AgentCapabilities fields; 0.3 had more (stateTransitionHistory), which 1.0 rejects.
A2A_CAPABILITY_FIELDS = ("streaming", "pushNotifications", "extensions", "extendedAgentCard")

# 0.3 security schemes were OpenAPI-style objects tagged by `type`; 1.0 wraps each in a oneof field.
LEGACY_SECURITY_SCHEME_FIELDS = {
    "apiKey": "apiKeySecurityScheme",
    "http": "httpAuthSecurityScheme",
    "oauth2": "oauth2SecurityScheme",
    "openIdConnect": "openIdConnectSecurityScheme",
    "mutualTLS": "mtlsSecurityScheme",
}

# A2A requires non-empty default modes; capreg skills are described by JSON Schemas.
FALLBACK_MODES = ["application/json"]

OPENAI_NAME_MAX = 64
OPENAI_NAME_HASH_CHARS = 8
OPENAI_NAME_DISALLOWED = re.compile(r"[^a-zA-Z0-9_-]")


# --- 0.3 to 1.0 --------------------------------------------------------------------------------


def normalize_registration(reg: AgentRegistration) -> AgentRegistration:
    """An A2A 0.3 registration converted to 1.0; a 1.0 registration is returned unchanged.

    0.3 fields (`url`, `preferredTransport`, `protocolVersion`, `additionalInterfaces`,
    `security`, `supportsAuthenticatedExtendedCard`) are folded into their 1.0 counterparts and
    cleared. When a card carries both (cards published for both versions do), the 1.0 fields win.
    """
    if not _has_legacy_fields(reg):
        return reg

    interfaces = reg.supported_interfaces or _legacy_interfaces(reg)
    requirements = reg.security_requirements or [_security_requirement_from_legacy(entry) for entry in reg.security]
    capabilities = {key: value for key, value in reg.capabilities.items() if key in A2A_CAPABILITY_FIELDS}
    if reg.supports_authenticated_extended_card is not None:
        capabilities.setdefault("extendedAgentCard", reg.supports_authenticated_extended_card)
    schemes = {name: _security_scheme_from_legacy(scheme) for name, scheme in reg.security_schemes.items()}
    return msgspec.structs.replace(
        reg,
        supported_interfaces=interfaces,
        security_requirements=requirements,
        security_schemes=schemes,
        capabilities=capabilities,
        protocol_version=None,
        url=None,
        preferred_transport=None,
        additional_interfaces=[],
        security=[],
        supports_authenticated_extended_card=None,
    )


def _has_legacy_fields(reg: AgentRegistration) -> bool:
    return (
        reg.url is not None
        or reg.preferred_transport is not None
        or reg.protocol_version is not None
        or bool(reg.additional_interfaces)
        or bool(reg.security)
        or reg.supports_authenticated_extended_card is not None
    )


def _legacy_interfaces(reg: AgentRegistration) -> list[AgentInterface]:
    """`url` + `preferredTransport` first, then `additionalInterfaces`, without duplicates.

    0.3 advised listing the main URL in `additionalInterfaces` as well, hence the de-duplication.
    """
    protocol_version = _major_minor(reg.protocol_version)
    candidates: list[tuple[Any, Any]] = [(reg.url, reg.preferred_transport)]
    candidates += [(entry.get("url"), entry.get("transport")) for entry in reg.additional_interfaces]
    interfaces: list[AgentInterface] = []
    seen: set[tuple[str, str]] = set()
    for url, transport in candidates:
        if not isinstance(url, str) or not url:
            continue
        binding = _legacy_binding(transport)
        if (url, binding) in seen:
            continue
        seen.add((url, binding))
        interfaces.append(AgentInterface(url=url, protocol_binding=binding, protocol_version=protocol_version))
    return interfaces


def _legacy_binding(transport: Any) -> str:
    """A 0.3 transport name as a 1.0 protocol binding (the names are the same: JSONRPC, GRPC,
    HTTP+JSON); absent means JSONRPC, the 0.3 default."""
    if not isinstance(transport, str) or not transport:
        return LEGACY_DEFAULT_TRANSPORT
    return transport.upper()


def _major_minor(protocol_version: str | None) -> str:
    """ "0.3.0" -> "0.3": A2A 1.0 interfaces name the protocol by major.minor."""
    if not protocol_version:
        return LEGACY_DEFAULT_PROTOCOL_VERSION
    return ".".join(protocol_version.split(".")[:2])


def _security_requirement_from_legacy(entry: dict[str, Any]) -> dict[str, Any]:
    """0.3 `{scheme: [scopes]}` -> 1.0 `{"schemes": {scheme: {"list": [scopes]}}}`."""
    return {"schemes": {name: {"list": list(scopes or [])} for name, scopes in entry.items()}}


def _security_scheme_from_legacy(scheme: Any) -> Any:
    """0.3 `{"type": "http", "scheme": "bearer"}` -> 1.0 `{"httpAuthSecurityScheme": {...}}`.

    Schemes already in 1.0 shape (no `type`) pass unchanged.
    """
    if not isinstance(scheme, dict) or scheme.get("type") not in LEGACY_SECURITY_SCHEME_FIELDS:
        return scheme
    body = {key: value for key, value in scheme.items() if key != "type"}
    if scheme["type"] == "apiKey" and "in" in body:
        body["location"] = body.pop("in")
    return {LEGACY_SECURITY_SCHEME_FIELDS[scheme["type"]]: body}


# --- Stored card -------------------------------------------------------------------------------


def a2a_card_dict(reg: AgentRegistration) -> dict[str, Any]:
    """The registration as an A2A 1.0 AgentCard (camelCase), without the registry's fields.

    Empty and absent values are left out, except `capabilities`, which A2A requires.
    """
    reg = normalize_registration(reg)
    card: dict[str, Any] = {
        "name": reg.name,
        "description": reg.description,
        "version": reg.version,
        "provider": msgspec.to_builtins(reg.provider) if reg.provider else None,
        "supportedInterfaces": [_interface_dict(each) for each in reg.supported_interfaces],
        "capabilities": _a2a_capabilities(reg.capabilities),
        "securitySchemes": reg.security_schemes,
        "securityRequirements": reg.security_requirements,
        "defaultInputModes": reg.default_input_modes,
        "defaultOutputModes": reg.default_output_modes,
        "documentationUrl": reg.documentation_url,
        "iconUrl": reg.icon_url,
        "signatures": msgspec.to_builtins(reg.signatures),
        "skills": [
            _without_empty(
                {
                    "id": skill.id,
                    "name": skill.name,
                    "description": skill.description,
                    "tags": skill.tags,
                    "examples": skill.examples,
                    "inputModes": skill.input_modes,
                    "outputModes": skill.output_modes,
                    "securityRequirements": skill.security_requirements,
                }
            )
            for skill in reg.skills
        ],
    }
    return _without_empty(card, keep=("capabilities",))


def _interface_dict(interface: AgentInterface) -> dict[str, Any]:
    return _without_empty(
        {
            "url": interface.url,
            "protocolBinding": interface.protocol_binding,
            "protocolVersion": interface.protocol_version,
            "tenant": interface.tenant,
        }
    )


def _a2a_capabilities(capabilities: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in capabilities.items() if key in A2A_CAPABILITY_FIELDS and value is not None}


def _without_empty(values: dict[str, Any], keep: tuple[str, ...] = ()) -> dict[str, Any]:
    """Top-level keys whose value is None, "" or an empty list/dict removed (nested values kept:
    an empty scope list inside a security requirement is meaningful)."""
    return {
        key: value
        for key, value in values.items()
        if key in keep or not (value is None or value == "" or value == [] or value == {})
    }


# --- Served cards ------------------------------------------------------------------------------


def public_agent_card(card: dict[str, Any], skills: list[CapabilityVersion], *, base_url: str) -> dict[str, Any]:
    """The anonymous A2A 1.0 card of an agent: the registry is its only interface (HTTP+JSON and
    JSON-RPC at the same URL).

    `card` is the stored card (`a2a_card_dict`); `skills` the versions the card lists, one per
    skill id; `base_url` is the agent's address at the registry,
    `{registry}/v1/agents/{tenant}/{agentId}`, from which an A2A client fetches
    `{base_url}/extendedAgentCard` (or with the JSON-RPC method `GetExtendedAgentCard`). Skills carry A2A fields only: no schemas, no examples, no
    capreg fields. The agent's own interfaces, security schemes and signatures never appear
    (the signatures covered a different document).
    """
    _check_unique_skill_ids(skills)
    public = _card_identity(card)
    public |= {
        "supportedInterfaces": [
            {
                "url": base_url.rstrip("/"),
                "protocolBinding": binding,
                "protocolVersion": PUBLIC_PROTOCOL_VERSION,
            }
            for binding in PUBLIC_PROTOCOL_BINDINGS
        ],
        "capabilities": {"extendedAgentCard": True},
        "securitySchemes": {
            CAPREG_SECURITY_SCHEME: {
                "httpAuthSecurityScheme": {
                    "scheme": "Bearer",
                    "bearerFormat": "JWT",
                    "description": (
                        "capreg access token (a JWT from a trusted issuer). The extended card "
                        "lists only the skills whose scopes and data regions the caller holds."
                    ),
                }
            }
        },
        "securityRequirements": [{"schemes": {CAPREG_SECURITY_SCHEME: {"list": []}}}],
        "skills": [_a2a_skill(cap, with_examples=False) for cap in skills],
    }
    return public


def extended_agent_card(card: dict[str, Any], skills: list[CapabilityVersion], *, base_url: str) -> dict[str, Any]:
    """The A2A 1.0 extended card for a caller that passed the detail checks.

    Lists only `skills` (one version per skill id), with the agent's real interfaces and
    security, and carries each skill's capreg fields (version, schemas, scopes, side effect,
    approval, regions, SLO, examples) in the capreg card extension under
    `capabilities.extensions[].params.skills[skillId]`, since AgentSkill has no place for them.
    `base_url` is the agent's address at the registry; each skill's entry links its detail.
    """
    _check_unique_skill_ids(skills)
    stored_skills = {skill.get("id"): skill for skill in card.get("skills", [])}
    capabilities = _a2a_capabilities(card.get("capabilities", {}))
    extensions = [
        extension for extension in capabilities.get("extensions", []) if extension.get("uri") != CAPREG_EXTENSION_URI
    ]
    extensions.append(
        {
            "uri": CAPREG_EXTENSION_URI,
            "description": (
                "capreg capability fields per skill id: version, JSON Schemas of input and "
                "output, required scopes, side effect, approval, data regions, SLO."
            ),
            "required": False,
            "params": {"skills": {cap.id: _capability_params(cap, base_url=base_url) for cap in skills}},
        }
    )
    extended = _card_identity(card)
    extended |= _without_empty(
        {
            "supportedInterfaces": card.get("supportedInterfaces", []),
            "securitySchemes": card.get("securitySchemes", {}),
            "securityRequirements": card.get("securityRequirements", []),
        }
    )
    extended |= {
        "capabilities": capabilities | {"extensions": extensions},
        "skills": [_a2a_skill(cap, with_examples=True, stored=stored_skills.get(cap.id)) for cap in skills],
    }
    return extended


def _card_identity(card: dict[str, Any]) -> dict[str, Any]:
    """The descriptive fields both served cards copy from the stored card."""
    return _without_empty(
        {
            "name": card["name"],
            "description": card["description"],
            "version": card["version"],
            "provider": card.get("provider"),
            "documentationUrl": card.get("documentationUrl"),
            "iconUrl": card.get("iconUrl"),
            "defaultInputModes": card.get("defaultInputModes") or FALLBACK_MODES,
            "defaultOutputModes": card.get("defaultOutputModes") or FALLBACK_MODES,
        }
    )


def _a2a_skill(cap: CapabilityVersion, *, with_examples: bool, stored: dict[str, Any] | None = None) -> dict[str, Any]:
    """An AgentSkill for a capability version.

    A2A requires a description and at least one tag, which a registration may lack: the name
    and the skill id's first segment stand in.
    """
    skill = {
        "id": cap.id,
        "name": cap.name,
        "description": cap.description or cap.name,
        "tags": cap.tags or [cap.id.split(".", 1)[0]],
        "inputModes": cap.input_modes,
        "outputModes": cap.output_modes,
    }
    if with_examples:
        skill["examples"] = cap.examples
    if stored is not None:
        # Per-skill requirements name the agent's own security schemes: extended card only.
        skill["securityRequirements"] = stored.get("securityRequirements", [])
    return _without_empty(skill)


def _capability_params(cap: CapabilityVersion, *, base_url: str) -> dict[str, Any]:
    """A skill's capreg fields as JSON values for the extension's `params` (a protobuf Struct)."""
    params = {
        "ref": cap.ref,
        "version": cap.version,
        "status": cap.status,
        "inputSchema": cap.input_schema,
        "outputSchema": cap.output_schema,
        "scopes": cap.scopes,
        "sideEffect": cap.side_effect,
        "requiresApproval": cap.requires_approval,
        "dataRegions": cap.data_regions,
        "slo": _without_empty(msgspec.to_builtins(cap.slo)) if cap.slo else None,
        "examples": cap.examples,
        "fixtures": cap.fixtures or None,
        "sunsetAt": msgspec.to_builtins(cap.sunset_at),
        "detailUrl": f"{base_url.rstrip('/')}/skills/{cap.id}/versions/{cap.version}",
    }
    # Empty lists stay: "no scopes" and "no region restriction" are facts, not absences.
    return {key: value for key, value in params.items() if value is not None}


def _check_unique_skill_ids(skills: list[CapabilityVersion]) -> None:
    seen: set[str] = set()
    for cap in skills:
        if cap.id in seen:
            raise ValueError(f"skill {cap.id!r} listed twice: a card lists one version per skill")
        seen.add(cap.id)


# --- Tools -------------------------------------------------------------------------------------


def openai_tool(cap: CapabilityVersion) -> dict[str, Any]:
    """The capability as an OpenAI function-calling tool definition."""
    return {
        "type": "function",
        "function": {
            "name": openai_function_name(cap.id),
            "description": cap.description or cap.name,
            "parameters": _object_schema(cap.input_schema),
            # Capability schemas use all of JSON Schema; strict mode accepts only a subset.
            "strict": False,
        },
    }


def openai_function_name(skill_id: str) -> str:
    """A skill id as an OpenAI function name (`^[a-zA-Z0-9_-]{1,64}$`).

    Other characters become `_`; an id too long is cut and ends in a hash of the whole id, so
    that ids sharing a long prefix still get distinct names.
    """
    name = OPENAI_NAME_DISALLOWED.sub("_", skill_id) or "_"
    if len(name) <= OPENAI_NAME_MAX:
        return name
    digest = hashlib.sha256(skill_id.encode()).hexdigest()[:OPENAI_NAME_HASH_CHARS]
    return f"{name[: OPENAI_NAME_MAX - OPENAI_NAME_HASH_CHARS - 1]}_{digest}"


def mcp_tool(cap: CapabilityVersion) -> dict[str, Any]:
    """The capability as an MCP tool definition (skill ids already fit MCP's name rules)."""
    tool: dict[str, Any] = {
        "name": cap.id,
        "title": cap.name,
        "description": cap.description or cap.name,
        "inputSchema": _object_schema(cap.input_schema),
        "annotations": _mcp_annotations(cap),
    }
    # MCP (through 2025-11-25) admits only object output schemas; an empty schema says nothing.
    if cap.output_schema.get("type") == "object":
        tool["outputSchema"] = cap.output_schema
    if cap.fixtures:  # behaviour fixtures, released as examples are (MCP's place for extra fields)
        tool["_meta"] = {CAPREG_FIXTURES_META: cap.fixtures}
    return tool


def _mcp_annotations(cap: CapabilityVersion) -> dict[str, Any]:
    """MCP behaviour hints derived from the declared side effect."""
    if cap.side_effect == "none":
        return {"readOnlyHint": True}
    return {
        "readOnlyHint": False,
        "destructiveHint": cap.side_effect == "destructive",
        "idempotentHint": cap.side_effect == "idempotent",
    }


def _object_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Both tool formats require `type: object` at the root; capreg input schemas describe
    objects but may leave the type implicit."""
    if "type" in schema:
        return schema
    return {"type": "object", **schema}
