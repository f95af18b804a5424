"""Capability records: the registration body (an A2A card plus registry fields) and the stored views."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, get_args

import msgspec

from auth.identifiers import AGENT_ID_PATTERN, SKILL_ID_PATTERN, TENANT_PATTERN
from registry.core.date_times import check_date_time
from registry.core.wire import Wire

SideEffect = Literal["none", "idempotent", "write", "destructive"]
# The side effects by rank, the one vocabulary (issue 36) every filter on them accepts (discovery's
# and offers' sideEffectMax, ARD's metadata.capreg.sideEffectMax, MCP's side_effect_max).
SIDE_EFFECT_NAMES: tuple[str, ...] = get_args(SideEffect)
SIDE_EFFECT_ORDER: dict[str, int] = {name: rank for rank, name in enumerate(SIDE_EFFECT_NAMES)}
Visibility = Literal["public", "tenant"]
# An agent's health, as db.agents.HEALTH_SQL decides it (the one rule, issue 36): healthy while any
# instance lease is live, stale once all have lapsed, unknown if none ever existed.
Health = Literal["healthy", "stale", "unknown"]


def approval_required(side_effect: str | None, explicit: bool | None) -> bool:
    """The one `requiresApproval` default: destructive capabilities need an approval unless the
    registrant says otherwise."""
    return explicit if isinstance(explicit, bool) else side_effect == "destructive"


# `candidate`: stored, but not in force until a replay report passes (docs/api.md#the-replay-gate).
Status = Literal["active", "deprecated", "retired", "candidate"]


def agent_ref(tenant: str, agent_id: str) -> str:
    """The one spelling of an agent reference, `tenant/agentId` (a ticket's audience)."""
    return f"{tenant}/{agent_id}"


def capability_ref(tenant: str, agent_id: str, skill_id: str, version: str) -> str:
    """The one spelling of a capability reference, `tenant/agentId/skillId@version` (`version` may
    be a request as written: `latest` or a range)."""
    return f"{agent_ref(tenant, agent_id)}/{skill_id}@{version}"


AgentId = Annotated[str, msgspec.Meta(pattern=AGENT_ID_PATTERN)]
SKILL_ID_MAX_LENGTH = 128
SkillId = Annotated[str, msgspec.Meta(pattern=SKILL_ID_PATTERN, max_length=SKILL_ID_MAX_LENGTH)]
Tenant = Annotated[str, msgspec.Meta(pattern=TENANT_PATTERN)]
ShortText = Annotated[str, msgspec.Meta(max_length=4096)]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
Tag = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
ScopeName = Annotated[str, msgspec.Meta(pattern=r"^[\x21\x23-\x5B\x5D-\x7E]{1,128}$")]
Region = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9-]{0,31}$")]
JsonSchema = dict[str, Any]

# What one registration may put into public answers (docs/api.md#limits): every list a card or a
# skill carries is bounded, so one registration cannot make a discovery item or a card huge.
MAX_TAGS = 32
# Values one filter of a list or search may name (ARD's `filter`, discovery's `tag`, offers' and MCP's
# `tag`): each value is a match over every visible row, so their count bounds a request's work
# (docs/security.md#round-4). Equal to MAX_TAGS: no capability carries more tags than an AND of
# tags can ask for.
MAX_FILTER_VALUES = MAX_TAGS
MAX_SCOPES = 32
MAX_REGIONS = 16
MAX_EXAMPLES = 16
MAX_SKILLS = 128
MAX_INTERFACES = 16
MAX_MODES = 16
MAX_SHARED_WITH = 256
# What one agent holds across registrations (skills left out of a PUT are kept, so per-body caps alone
# let it grow without end; docs/security.md#round-4): at most MAX_SKILLS skills with a version not
# retired, and at most MAX_AGENT_CONTENT_BYTES of their shown content (skill_content_size, the
# largest such version of each skill), so every answer built from one agent (view, card, ARD entry)
# stays about that size.
MAX_AGENT_CONTENT_BYTES = 2 * 1024 * 1024


class Slo(Wire, forbid_unknown_fields=True):
    latency_p99_ms: Annotated[int, msgspec.Meta(ge=0)] | None = None
    availability: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None


class Provider(Wire):
    organization: Name
    url: ShortText


class AgentInterface(Wire):
    url: ShortText
    protocol_binding: ShortText
    protocol_version: ShortText = "1.0"
    tenant: ShortText | None = None


FIXTURE_NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
# `ok`, or the error code the implementation is expected to answer with.
OUTCOME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$"
MAX_FIXTURES = 100
MAX_FIXTURE_BYTES = 64 * 1024


class FixtureExpectation(Wire, forbid_unknown_fields=True):
    """What running a fixture must give: the outcome, the output it must contain (optional), and
    the most side effect it may have."""

    outcome: Annotated[str, msgspec.Meta(pattern=OUTCOME_PATTERN)]
    side_effect: SideEffect
    output: Any | msgspec.UnsetType = msgspec.UNSET


class Fixture(Wire, forbid_unknown_fields=True):
    """A behaviour fixture: an input the version must keep answering as `expect` says."""

    name: Annotated[str, msgspec.Meta(pattern=FIXTURE_NAME_PATTERN)]
    input: dict[str, Any]
    expect: FixtureExpectation


class SkillRegistration(Wire):
    """One skill of a registration: A2A AgentSkill fields plus the registry's capability fields."""

    id: SkillId
    name: Name
    description: ShortText
    version: Annotated[str, msgspec.Meta(max_length=128)]
    side_effect: SideEffect
    # Required: who may see the detail (schemas, endpoints) is always said, never a silent default;
    # [] says any valid token may (docs/api.md#registering-agents).
    scopes: Annotated[list[ScopeName], msgspec.Meta(max_length=MAX_SCOPES)]
    tags: Annotated[list[Tag], msgspec.Meta(max_length=MAX_TAGS)] = []
    examples: Annotated[list[ShortText], msgspec.Meta(max_length=MAX_EXAMPLES)] = []
    input_modes: Annotated[list[ShortText], msgspec.Meta(max_length=MAX_MODES)] = []
    output_modes: Annotated[list[ShortText], msgspec.Meta(max_length=MAX_MODES)] = []
    security_requirements: list[dict[str, Any]] = []
    input_schema: JsonSchema = msgspec.field(default_factory=lambda: {"type": "object"})
    output_schema: JsonSchema = msgspec.field(default_factory=dict)
    requires_approval: bool | None = None
    data_regions: Annotated[list[Region], msgspec.Meta(max_length=MAX_REGIONS)] = []
    slo: Slo | None = None
    effective_at: datetime | None = None
    # At most MAX_FIXTURES (checked with the schemas, registry.versions.fixtures), each at most MAX_FIXTURE_BYTES.
    fixtures: Annotated[list[Fixture], msgspec.Meta(max_length=MAX_FIXTURES)] = []

    def __post_init__(self) -> None:
        check_date_time("effectiveAt", self.effective_at)


MAX_SIGNATURES = 8


class CardSignature(Wire, omit_defaults=True):
    """One A2A AgentCardSignature: a JWS with its payload detached (docs/api.md#signed-cards)."""

    protected: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]
    signature: Annotated[str, msgspec.Meta(min_length=1, max_length=1024)]
    header: Annotated[dict[str, Any], msgspec.Meta(max_length=32)] | None = None


class AgentRegistration(Wire):
    """PUT body: an A2A 1.0 AgentCard (0.3 fields accepted and converted) plus registry fields."""

    name: Name
    description: ShortText
    version: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    skills: Annotated[list[SkillRegistration], msgspec.Meta(max_length=MAX_SKILLS)]
    provider: Provider | None = None
    supported_interfaces: Annotated[list[AgentInterface], msgspec.Meta(max_length=MAX_INTERFACES)] = []
    capabilities: dict[str, Any] = {}
    default_input_modes: Annotated[list[ShortText], msgspec.Meta(max_length=MAX_MODES)] = []
    default_output_modes: Annotated[list[ShortText], msgspec.Meta(max_length=MAX_MODES)] = []
    documentation_url: ShortText | None = None
    icon_url: ShortText | None = None
    security_schemes: dict[str, Any] = {}
    security_requirements: list[dict[str, Any]] = []
    # Publisher signatures over the body without this member, bound to the path's tenant and agent id
    # (registry.agents.publisher_signatures).
    signatures: Annotated[list[CardSignature], msgspec.Meta(max_length=MAX_SIGNATURES)] = []
    visibility: Visibility = "tenant"
    shared_with: Annotated[list[Tenant], msgspec.Meta(max_length=MAX_SHARED_WITH)] = []
    # A2A 0.3 fields, converted to supportedInterfaces and dropped.
    protocol_version: ShortText | None = None
    url: ShortText | None = None
    preferred_transport: ShortText | None = None
    additional_interfaces: Annotated[list[dict[str, Any]], msgspec.Meta(max_length=MAX_INTERFACES)] = []
    security: list[dict[str, Any]] = []
    supports_authenticated_extended_card: bool | None = None


class CapabilityVersion(Wire):
    """A published capability version as stored: everything, schemas and examples included."""

    tenant: str
    agent_id: str
    id: str
    version: str
    name: str
    description: str
    tags: list[str]
    scopes: list[str]
    side_effect: SideEffect
    requires_approval: bool
    data_regions: list[str]
    slo: Slo | None
    examples: list[str]
    input_schema: JsonSchema
    output_schema: JsonSchema
    input_modes: list[str]
    output_modes: list[str]
    status: Status
    sunset_at: datetime | None
    deprecation_message: str | None
    effective_at: datetime | None
    published_at: datetime
    # How many fixtures the version carries; the fixtures themselves only once it is released
    # (registry.release.service), as stored (camelCase JSON).
    fixture_count: int = 0
    fixtures: list[dict[str, Any]] = []
    # A candidate's baseline: the version whose fixtures judge it (None for every other version).
    baseline: str | None = None

    @property
    def ref(self) -> str:
        return capability_ref(self.tenant, self.agent_id, self.id, self.version)


class PublicCapability(Wire):
    """The discovery view of a capability version: no schemas, no examples, no endpoints."""

    ref: str
    tenant: str
    agent_id: str
    id: str
    version: str
    name: str
    description: str
    tags: list[str]
    scopes: list[str]
    side_effect: SideEffect
    requires_approval: bool
    data_regions: list[str]
    slo: Slo | None
    status: Status
    sunset_at: datetime | None
    effective_at: datetime | None
    health: Health
    # Unexpired instance leases of the agent (heartbeats).
    live_instances: int
    updated_at: datetime
