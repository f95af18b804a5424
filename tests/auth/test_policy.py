"""Policy rules: visibility, detail release, ticket narrowing, actor chains, approvals."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from auth.policy import (
    DATA_LOCATION_DENIED,
    NOT_FOUND,
    ApprovalParties,
    CapabilityGate,
    ParentTicket,
    Refusal,
    TicketParties,
    TicketRequest,
    actor_chain,
    actors_in_chain,
    can_see,
    check_approval_decider,
    check_approval_reader,
    check_first_ticket,
    check_heartbeat,
    check_introspect,
    check_lifecycle,
    check_parent_standing,
    check_publish,
    check_redelegation,
    check_revoke,
    check_scope,
    child_ticket_grant,
    decide_release,
    escalated_scopes,
    first_ticket_grant,
    normalized_ticket_request,
    validate_ticket_request,
)
from auth.principal import Caller
from registry.core.records import CapabilityVersion

NOW = 1_800_000_000
MAX_TTL = 900
REF = "acme/billing-agent/invoice.lookup@2.0.0"
ALLOWED = None
RETIRED = Refusal(code="retired", message=f"{REF} is retired")


def scopes_missing(*missing: str) -> Refusal:
    return Refusal(
        code="insufficient_scope",
        message=f"releasing this capability needs the scopes: {' '.join(missing)}",
        missing_scopes=missing,
    )


def caller(
    tenant: str = "acme", sub: str = "router", scopes: tuple[str, ...] = (), regions: tuple[str, ...] | None = None
) -> Caller:
    return Caller(tenant=tenant, sub=sub, scopes=frozenset(scopes), regions=regions)


def gate(**fields: object) -> CapabilityGate:
    base: dict[str, object] = {
        "tenant": "acme",
        "visibility": "tenant",
        "shared_with": (),
        "scopes": ("invoice:read",),
        "data_regions": (),
        "status": "active",
        "ref": REF,
    }
    base.update(fields)
    return CapabilityGate(**base)  # type: ignore[arg-type]


def request(**fields: object) -> TicketRequest:
    base: dict[str, object] = {
        "audience": "acme/billing-agent",
        "skill": "invoice.lookup",
        "version": "^2",
        "scopes": ("invoice:read",),
        "resources": (),
        "on_behalf_of": None,
        "ttl_seconds": 300,
        "max_depth": 0,
    }
    base.update(fields)
    return TicketRequest(**base)  # type: ignore[arg-type]


def parent(**fields: object) -> ParentTicket:
    base: dict[str, object] = {
        "jti": "t-parent",
        "sub": "user-19",
        "aud": "acme/router",
        "act": {"sub": "acme/frontend"},
        "tenant": "acme",
        "scopes": ("invoice:read", "invoice:list"),
        "resources": (),
        "exp": NOW + 600,
        "depth": 0,
        "max_depth": 2,
        "on_behalf_of": "user-19",
    }
    base.update(fields)
    return ParentTicket(**base)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# Visibility


@pytest.mark.parametrize(
    ("who", "tenant", "visibility", "shared_with", "expected"),
    [
        (None, "acme", "public", (), True),
        (None, "acme", "tenant", (), False),
        (None, "acme", "tenant", ("globex",), False),
        (caller("acme"), "acme", "tenant", (), True),
        (caller("acme"), "acme", "public", (), True),
        (caller("globex"), "acme", "public", (), True),
        (caller("globex"), "acme", "tenant", (), False),
        (caller("globex"), "acme", "tenant", ("globex",), True),
        (caller("globex"), "acme", "tenant", ("initech",), False),
        (caller("Acme"), "acme", "tenant", (), False),
        (caller("globex"), "acme", "tenant", ("Globex",), False),
    ],
)
def test_can_see(
    who: Caller | None, tenant: str, visibility: str, shared_with: tuple[str, ...], expected: bool
) -> None:
    assert can_see(who, tenant=tenant, visibility=visibility, shared_with=shared_with) is expected


# ---------------------------------------------------------------------------
# Detail release


@pytest.mark.parametrize(
    ("who", "cap", "expected"),
    [
        # Anonymous never gets details, even of public records.
        (None, gate(visibility="public"), NOT_FOUND),
        (None, gate(), NOT_FOUND),
        # Visibility.
        (caller("globex", scopes=("invoice:read",)), gate(), NOT_FOUND),
        (caller("globex", scopes=("invoice:read",)), gate(shared_with=("initech",)), NOT_FOUND),
        (caller("globex", scopes=("invoice:read",)), gate(shared_with=("globex",)), ALLOWED),
        (caller("globex", scopes=("invoice:read",)), gate(visibility="public"), ALLOWED),
        (caller("acme", scopes=("invoice:read",)), gate(), ALLOWED),
        # Retired, exact version requested.
        (caller("acme", scopes=("invoice:read",)), gate(status="retired"), RETIRED),
        (caller("acme", scopes=("invoice:read",)), gate(status="deprecated"), ALLOWED),
        # Scopes: exact, case-sensitive, all of them, sorted in the answer.
        (
            caller("acme"),
            gate(scopes=("invoice:write", "invoice:read")),
            scopes_missing("invoice:read", "invoice:write"),
        ),
        (
            caller("acme", scopes=("invoice:read",)),
            gate(scopes=("invoice:write", "invoice:read")),
            scopes_missing("invoice:write"),
        ),
        (
            caller("acme", scopes=("Invoice:read",)),
            gate(),
            scopes_missing("invoice:read"),
        ),
        (caller("acme"), gate(scopes=()), ALLOWED),
        (caller("acme", scopes=("registry:admin",)), gate(scopes=()), ALLOWED),
        # Data regions.
        (caller("acme", scopes=("invoice:read",)), gate(data_regions=("eu",)), DATA_LOCATION_DENIED),
        (caller("acme", scopes=("invoice:read",), regions=()), gate(data_regions=("eu",)), DATA_LOCATION_DENIED),
        (caller("acme", scopes=("invoice:read",), regions=("us",)), gate(data_regions=("eu",)), DATA_LOCATION_DENIED),
        (caller("acme", scopes=("invoice:read",), regions=("us", "eu")), gate(data_regions=("eu",)), ALLOWED),
        (caller("acme", scopes=("invoice:read",), regions=("eu",)), gate(data_regions=("eu", "us")), ALLOWED),
        (caller("acme", scopes=("invoice:read",), regions=None), gate(data_regions=()), ALLOWED),
        # Order: visibility before retirement before scopes before regions.
        (caller("globex"), gate(status="retired", data_regions=("eu",)), NOT_FOUND),
        (caller("acme"), gate(status="retired", data_regions=("eu",)), RETIRED),
        (
            caller("acme", regions=("us",)),
            gate(data_regions=("eu",)),
            scopes_missing("invoice:read"),
        ),
    ],
)
def test_decide_release(who: Caller | None, cap: CapabilityGate, expected: Refusal | None) -> None:
    assert decide_release(who, cap) == expected


def test_refusal_constants() -> None:
    assert NOT_FOUND == Refusal(code="not_found", message="no such capability version")
    assert DATA_LOCATION_DENIED.code == "data_location_denied" and DATA_LOCATION_DENIED.reason is None
    # A refusal says what was refused and why, never an HTTP status (registry.core.problems maps codes).
    assert set(msgspec.json.decode(msgspec.json.encode(NOT_FOUND))) == {"code", "message", "reason", "missing_scopes"}


def test_retired_reached_by_range_is_not_found() -> None:
    who = caller("acme", scopes=("invoice:read",))
    assert decide_release(who, gate(status="retired"), exact_version=False) is NOT_FOUND
    assert decide_release(who, gate(status="active"), exact_version=False) == ALLOWED


def test_invisible_is_the_same_object_as_missing() -> None:
    # The HTTP layer answers NOT_FOUND for a missing record; an invisible one must be indistinguishable.
    assert decide_release(caller("globex", scopes=("invoice:read",)), gate()) is NOT_FOUND


def test_gate_of_capability_version() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    version = CapabilityVersion(
        tenant="acme", agent_id="billing-agent", id="invoice.lookup", version="2.0.0", name="Look up", description="",
        tags=[], scopes=["invoice:read"], side_effect="none", requires_approval=False, data_regions=["eu"], slo=None,
        examples=[], input_schema={"type": "object"}, output_schema={}, input_modes=[], output_modes=[],
        status="deprecated", sunset_at=None, deprecation_message=None, effective_at=None, published_at=at,
    )  # fmt: skip
    assert CapabilityGate.of(version, visibility="tenant", shared_with=["globex"]) == CapabilityGate(
        tenant="acme",
        visibility="tenant",
        shared_with=("globex",),
        scopes=("invoice:read",),
        data_regions=("eu",),
        status="deprecated",
        ref=REF,
    )


# ---------------------------------------------------------------------------
# Scope narrowing


@pytest.mark.parametrize(
    ("requested", "allowed_sets", "expected"),
    [
        (("a",), (("a", "b"),), ()),
        (("a", "b"), (("a", "b"), ("b", "a", "c")), ()),
        (("a", "b"), (("a", "b"), ("a",)), ("b",)),
        (("c", "a", "b"), (("a",),), ("b", "c")),
        (("A",), (("a",),), ("A",)),
        (("invoice:Read",), (("invoice:read",),), ("invoice:Read",)),
        (("invoice:read ",), (("invoice:read",),), ("invoice:read ",)),
        (("a", "a"), (("a",), ("a",)), ()),
        ((), (("a",),), ()),
        (("a",), ((),), ("a",)),
        (("a",), (), ("a",)),
    ],
)
def test_escalated_scopes(
    requested: tuple[str, ...], allowed_sets: tuple[tuple[str, ...], ...], expected: tuple[str, ...]
) -> None:
    assert escalated_scopes(requested, *allowed_sets) == expected


# ---------------------------------------------------------------------------
# Ticket request validation


def test_valid_request_has_no_errors() -> None:
    assert validate_ticket_request(request(), max_ttl=MAX_TTL) == []
    assert (
        validate_ticket_request(
            request(ttl_seconds=MAX_TTL, max_depth=10, resources=("invoice:1",), on_behalf_of="user-19"),
            max_ttl=MAX_TTL,
        )
        == []
    )
    assert validate_ticket_request(request(scopes=("a", "a")), max_ttl=MAX_TTL) == []


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"scopes": ()}, "$.scopes"),
        ({"scopes": ("invoice:read", "")}, "$.scopes[1]"),
        ({"scopes": ("invoice read",)}, "$.scopes[0]"),
        ({"scopes": ('invoice"read',)}, "$.scopes[0]"),
        ({"ttl_seconds": 0}, "$.ttlSeconds"),
        ({"ttl_seconds": -5}, "$.ttlSeconds"),
        ({"ttl_seconds": MAX_TTL + 1}, "$.ttlSeconds"),
        ({"max_depth": -1}, "$.maxDepth"),
        ({"max_depth": 11}, "$.maxDepth"),
        ({"audience": "billing-agent"}, "$.audience"),
        ({"audience": "acme/billing-agent/x"}, "$.audience"),
        ({"audience": "ACME/billing-agent"}, "$.audience"),
        ({"skill": "Invoice.lookup"}, "$.skill"),
        ({"skill": "a" * 129}, "$.skill"),
        ({"version": ""}, "$.version"),
        ({"resources": ("invoice:1", "")}, "$.resources[1]"),
        ({"on_behalf_of": ""}, "$.onBehalfOf"),
    ],
)
def test_invalid_request(fields: dict[str, object], path: str) -> None:
    errors = validate_ticket_request(request(**fields), max_ttl=MAX_TTL)
    assert [e["path"] for e in errors] == [path]
    assert all(set(e) == {"path", "message"} and e["message"] for e in errors)


def test_all_errors_are_reported() -> None:
    errors = validate_ticket_request(request(scopes=(), ttl_seconds=0, max_depth=-1), max_ttl=MAX_TTL)
    assert [e["path"] for e in errors] == ["$.scopes", "$.ttlSeconds", "$.maxDepth"]


def test_max_ttl_is_configurable() -> None:
    assert validate_ticket_request(request(ttl_seconds=1000), max_ttl=3600) == []
    assert [e["path"] for e in validate_ticket_request(request(ttl_seconds=61), max_ttl=60)] == ["$.ttlSeconds"]


def test_normalized_request_folds_duplicates() -> None:
    req = normalized_ticket_request(request(scopes=("b", "a", "b"), resources=("r2", "r1", "r2")))
    assert req.scopes == ("a", "b")
    assert req.resources == ("r1", "r2")


# ---------------------------------------------------------------------------
# First tickets


@pytest.mark.parametrize(
    ("held", "capability_scopes", "requested", "reason"),
    [
        (("invoice:read",), ("invoice:read",), ("invoice:read",), None),
        (("invoice:read", "invoice:write"), ("invoice:read", "invoice:write"), ("invoice:read",), None),
        (("invoice:read", "invoice:write"), ("invoice:read", "invoice:write"), ("invoice:write", "invoice:read"), None),
        # Held but not served by the capability.
        (("invoice:read", "invoice:write"), ("invoice:read",), ("invoice:write",), "scope_escalation"),
        # Served but not held.
        (("invoice:read",), ("invoice:read", "invoice:write"), ("invoice:write",), "scope_escalation"),
        (("invoice:read",), ("invoice:read", "invoice:write"), ("invoice:read", "invoice:write"), "scope_escalation"),
        # Case variants are escalations.
        (("invoice:read",), ("invoice:read",), ("Invoice:read",), "scope_escalation"),
        (("Invoice:read",), ("invoice:read",), ("invoice:read",), "scope_escalation"),
        # Registry scopes are not capability scopes.
        (("registry:admin",), ("invoice:read",), ("invoice:read",), "scope_escalation"),
        (("registry:admin",), ("invoice:read",), ("registry:admin",), "scope_escalation"),
    ],
)
def test_check_first_ticket(
    held: tuple[str, ...], capability_scopes: tuple[str, ...], requested: tuple[str, ...], reason: str | None
) -> None:
    refusal = check_first_ticket(caller(scopes=held), request(scopes=requested), capability_scopes)
    assert (refusal.reason if refusal else None) == reason
    if refusal:
        assert refusal.code == "delegation_denied"
        assert refusal.message


def test_first_ticket_grant() -> None:
    who = caller("acme", "router", scopes=("invoice:read",))
    grant = first_ticket_grant(
        who,
        request(scopes=("invoice:read", "invoice:read"), resources=("r2", "r1"), on_behalf_of="user-19", max_depth=1),
        now=NOW,
    )
    assert grant.sub == "user-19"
    assert grant.aud == "acme/billing-agent"
    assert grant.act == {"sub": "acme/router"}
    assert grant.scopes == ("invoice:read",)
    assert grant.resources == ("r1", "r2")
    assert grant.exp == NOW + 300
    assert (grant.depth, grant.max_depth, grant.parent, grant.on_behalf_of) == (0, 1, None, "user-19")


def test_first_ticket_without_subject_is_the_caller() -> None:
    grant = first_ticket_grant(caller("acme", "router"), request(), now=NOW)
    assert grant.sub == "acme/router"
    assert grant.on_behalf_of is None


# ---------------------------------------------------------------------------
# Re-delegation

ROUTER = caller("acme", "router", scopes=("invoice:read",))


@pytest.mark.parametrize(
    ("who", "req", "par", "capability_scopes", "reason"),
    [
        # Accepted: narrower scopes, inherited subject, within lifetime and depth.
        (ROUTER, request(scopes=("invoice:read",), max_depth=1), parent(), ("invoice:read",), None),
        (ROUTER, request(on_behalf_of="user-19", ttl_seconds=600), parent(), ("invoice:read",), None),
        (ROUTER, request(on_behalf_of=None), parent(on_behalf_of=None, sub="acme/frontend"), ("invoice:read",), None),
        (
            ROUTER,
            request(resources=("invoice:1",)),
            parent(resources=("invoice:1", "invoice:2")),
            ("invoice:read",),
            None,
        ),
        (
            ROUTER,
            request(resources=("invoice:1", "invoice:2")),
            parent(resources=("invoice:1", "invoice:2")),
            ("invoice:read",),
            None,
        ),
        (ROUTER, request(resources=()), parent(resources=()), ("invoice:read",), None),
        (ROUTER, request(resources=("anything",)), parent(resources=()), ("invoice:read",), None),
        (ROUTER, request(), parent(act=None), ("invoice:read",), None),
        # The child may target another capability, still within the parent's scopes.
        (
            ROUTER,
            request(audience="acme/ledger", skill="ledger.read", scopes=("invoice:list",)),
            parent(),
            ("invoice:list", "ledger:read"),
            None,
        ),
        # Re-delegation acts on the parent's authority, not the caller's token scopes.
        (caller("acme", "router"), request(), parent(), ("invoice:read",), None),
        # Parent expired.
        (ROUTER, request(), parent(exp=NOW), ("invoice:read",), "parent_invalid"),
        (ROUTER, request(), parent(exp=NOW - 1), ("invoice:read",), "parent_invalid"),
        # Not the parent's audience.
        (caller("acme", "billing-agent"), request(), parent(), ("invoice:read",), "not_parent_audience"),
        (caller("globex", "router"), request(), parent(), ("invoice:read",), "not_parent_audience"),
        (caller("acme", "Router"), request(), parent(), ("invoice:read",), "not_parent_audience"),
        (caller("acme", "frontend"), request(), parent(), ("invoice:read",), "not_parent_audience"),
        # Scopes beyond the parent, or beyond the child capability.
        (ROUTER, request(scopes=("invoice:write",)), parent(), ("invoice:read", "invoice:write"), "scope_escalation"),
        (
            ROUTER,
            request(scopes=("invoice:read", "invoice:write")),
            parent(),
            ("invoice:read", "invoice:write"),
            "scope_escalation",
        ),
        (ROUTER, request(scopes=("invoice:list",)), parent(), ("invoice:read",), "scope_escalation"),
        (ROUTER, request(scopes=("INVOICE:READ",)), parent(), ("invoice:read", "INVOICE:READ"), "scope_escalation"),
        # Resources beyond a restricted parent; an empty child list would widen it to everything.
        (
            ROUTER,
            request(resources=("invoice:3",)),
            parent(resources=("invoice:1",)),
            ("invoice:read",),
            "resource_escalation",
        ),
        (
            ROUTER,
            request(resources=("invoice:1", "invoice:3")),
            parent(resources=("invoice:1",)),
            ("invoice:read",),
            "resource_escalation",
        ),
        (ROUTER, request(resources=()), parent(resources=("invoice:1",)), ("invoice:read",), "resource_escalation"),
        (
            ROUTER,
            request(resources=("Invoice:1",)),
            parent(resources=("invoice:1",)),
            ("invoice:read",),
            "resource_escalation",
        ),
        # Depth.
        (ROUTER, request(max_depth=0), parent(max_depth=0), ("invoice:read",), "depth_exhausted"),
        (ROUTER, request(max_depth=0), parent(max_depth=-1), ("invoice:read",), "depth_exhausted"),
        (ROUTER, request(max_depth=2), parent(max_depth=2), ("invoice:read",), "depth_exhausted"),
        (ROUTER, request(max_depth=1), parent(max_depth=1), ("invoice:read",), "depth_exhausted"),
        # Lifetime: never clamped silently.
        (ROUTER, request(ttl_seconds=601), parent(exp=NOW + 600), ("invoice:read",), "lifetime_escalation"),
        (ROUTER, request(ttl_seconds=900), parent(exp=NOW + 600), ("invoice:read",), "lifetime_escalation"),
        (ROUTER, request(ttl_seconds=600), parent(exp=NOW + 600), ("invoice:read",), None),
        # Subject cannot change, nor appear where the parent had none.
        (ROUTER, request(on_behalf_of="user-20"), parent(), ("invoice:read",), "on_behalf_of_mismatch"),
        (
            ROUTER,
            request(on_behalf_of="user-19"),
            parent(on_behalf_of=None, sub="acme/frontend"),
            ("invoice:read",),
            "on_behalf_of_mismatch",
        ),
        (ROUTER, request(on_behalf_of="User-19"), parent(), ("invoice:read",), "on_behalf_of_mismatch"),
        # Actor chain: the caller already acted on this chain.
        (ROUTER, request(), parent(act={"sub": "acme/router"}), ("invoice:read",), "actor_repeated"),
        (
            ROUTER,
            request(),
            parent(act={"sub": "acme/a", "act": {"sub": "acme/router"}}),
            ("invoice:read",),
            "actor_repeated",
        ),
        (
            ROUTER,
            request(),
            parent(act={"sub": "acme/a", "act": {"sub": "acme/b", "act": {"sub": "acme/a"}}}),
            ("invoice:read",),
            "actor_repeated",
        ),
        # Order: the first failing check wins.
        (caller("acme", "billing-agent"), request(scopes=("x",)), parent(exp=NOW - 1), ("x",), "parent_invalid"),
        (caller("acme", "billing-agent"), request(scopes=("x",)), parent(), ("x",), "not_parent_audience"),
        (ROUTER, request(scopes=("x",), resources=("r9",)), parent(resources=("r1",)), ("x",), "scope_escalation"),
        (
            ROUTER,
            request(resources=("r9",), max_depth=5),
            parent(resources=("r1",)),
            ("invoice:read",),
            "resource_escalation",
        ),
        (ROUTER, request(max_depth=5, ttl_seconds=900), parent(), ("invoice:read",), "depth_exhausted"),
        (ROUTER, request(ttl_seconds=900, on_behalf_of="user-20"), parent(), ("invoice:read",), "lifetime_escalation"),
        (
            ROUTER,
            request(on_behalf_of="user-20"),
            parent(act={"sub": "acme/router"}),
            ("invoice:read",),
            "on_behalf_of_mismatch",
        ),
    ],
)
def test_check_redelegation(
    who: Caller, req: TicketRequest, par: ParentTicket, capability_scopes: tuple[str, ...], reason: str | None
) -> None:
    refusal = check_redelegation(who, req, par, capability_scopes, now=NOW)
    assert (refusal.reason if refusal else None) == reason
    if refusal:
        assert refusal.code == "delegation_denied"
        assert refusal.message


def test_child_ticket_grant() -> None:
    par = parent(
        resources=("invoice:1", "invoice:2"),
        act={"sub": "acme/frontend", "act": {"sub": "acme/gateway"}},
        depth=1,
        max_depth=3,
    )
    req = request(scopes=("invoice:read",), resources=("invoice:2",), ttl_seconds=120, max_depth=2)
    assert check_redelegation(ROUTER, req, par, ("invoice:read",), now=NOW) is None
    grant = child_ticket_grant(ROUTER, req, par, now=NOW)
    assert grant.sub == "user-19"
    assert grant.on_behalf_of == "user-19"
    assert grant.aud == "acme/billing-agent"
    assert grant.act == {"sub": "acme/router", "act": {"sub": "acme/frontend", "act": {"sub": "acme/gateway"}}}
    assert actors_in_chain(grant.act) == ["acme/router", "acme/frontend", "acme/gateway"]
    assert grant.scopes == ("invoice:read",)
    assert grant.resources == ("invoice:2",)
    assert grant.exp == NOW + 120
    assert (grant.depth, grant.max_depth, grant.parent) == (2, 2, "t-parent")


def test_child_without_subject_is_the_redelegating_caller() -> None:
    grant = child_ticket_grant(ROUTER, request(), parent(on_behalf_of=None, sub="acme/frontend"), now=NOW)
    assert grant.sub == "acme/router"
    assert grant.on_behalf_of is None


# ---------------------------------------------------------------------------
# Actor chains and parent claims


@pytest.mark.parametrize(
    ("act", "actors"),
    [
        (None, []),
        ({}, []),
        ({"sub": "acme/a"}, ["acme/a"]),
        ({"sub": "acme/a", "act": {"sub": "acme/b"}}, ["acme/a", "acme/b"]),
        ({"sub": "acme/a", "act": {"sub": "acme/b", "act": {"sub": "globex/c"}}}, ["acme/a", "acme/b", "globex/c"]),
        ({"sub": "acme/a", "act": None}, ["acme/a"]),
    ],
)
def test_actors_in_chain(act: dict[str, object] | None, actors: list[str]) -> None:
    assert actors_in_chain(act) == actors


def test_actor_chain_nests_the_previous_chain() -> None:
    assert actor_chain("acme/a", None) == {"sub": "acme/a"}
    assert actor_chain("acme/b", {"sub": "acme/a"}) == {"sub": "acme/b", "act": {"sub": "acme/a"}}
    previous = {"sub": "acme/b", "act": {"sub": "acme/a"}}
    assert actor_chain("acme/c", previous) == {"sub": "acme/c", "act": previous}
    assert previous == {"sub": "acme/b", "act": {"sub": "acme/a"}}


def test_parent_from_claims() -> None:
    claims = {
        "iss": "capreg",
        "sub": "user-19",
        "aud": "acme/router",
        "act": {"sub": "acme/frontend"},
        "tenant": "acme",
        "scope": "invoice:read invoice:list",
        "cap": {"ref": "acme/router/invoice.route@1.0.0", "id": "invoice.route", "version": "1.0.0"},
        "resources": ["invoice:1"],
        "iat": NOW - 10,
        "nbf": NOW - 10,
        "exp": NOW + 600,
        "jti": "t-parent",
        "depth": 0,
        "maxDepth": 2,
    }
    assert ParentTicket.from_claims(claims) == parent(resources=("invoice:1",))
    own = dict(claims, sub="acme/frontend")
    assert ParentTicket.from_claims(own).on_behalf_of is None


# ---------------------------------------------------------------------------
# Approvals


@pytest.mark.parametrize(
    ("decider", "requester", "capability_tenant", "expected"),
    [
        (caller("acme", "alice", scopes=("registry:admin",)), "acme/router", "acme", None),
        (caller("acme", "alice", scopes=("registry:admin",)), "globex/router", "acme", None),
        (
            caller("acme", "router", scopes=("registry:admin",)),
            "acme/router",
            "acme",
            ("self_approval", "delegation_denied"),
        ),
        (caller("acme", "router"), "acme/router", "acme", ("self_approval", "delegation_denied")),
        (
            caller("globex", "router", scopes=("registry:admin",)),
            "globex/router",
            "acme",
            ("self_approval", "delegation_denied"),
        ),
        (caller("globex", "alice", scopes=("registry:admin",)), "acme/router", "acme", (None, "not_found")),
        (caller("acme", "alice", scopes=("registry:publish",)), "acme/router", "acme", (None, "insufficient_scope")),
        (caller("acme", "alice", scopes=("Registry:admin",)), "acme/router", "acme", (None, "insufficient_scope")),
        # Same sub in another tenant is another principal.
        (caller("acme", "router", scopes=("registry:admin",)), "globex/router", "acme", None),
    ],
)
def test_check_approval_decider(
    decider: Caller, requester: str, capability_tenant: str, expected: tuple[str, str] | None
) -> None:
    refusal = check_approval_decider(decider, ApprovalParties(requester=requester, tenant=capability_tenant))
    assert ((refusal.reason, refusal.code) if refusal else None) == expected


# ---------------------------------------------------------------------------
# Properties

TENANTS = ("acme", "globex", "initech")
SCOPES = ("invoice:read", "Invoice:read", "invoice:write", "ledger:read", "registry:admin")
REGIONS = ("eu", "us", "ap")
PRINCIPALS = ("acme/router", "acme/frontend", "acme/gateway", "globex/router", "globex/agent")

scope_sets = st.frozensets(st.sampled_from(SCOPES))
region_tuples = st.lists(st.sampled_from(REGIONS), unique=True, max_size=3).map(tuple)

callers = st.builds(
    Caller,
    tenant=st.sampled_from(TENANTS),
    sub=st.sampled_from(("router", "frontend", "agent")),
    scopes=scope_sets,
    regions=st.none() | region_tuples,
)
gates = st.builds(
    CapabilityGate,
    tenant=st.sampled_from(TENANTS),
    visibility=st.sampled_from(("public", "tenant")),
    shared_with=st.lists(st.sampled_from(TENANTS), unique=True, max_size=2).map(tuple),
    scopes=st.lists(st.sampled_from(SCOPES), unique=True, max_size=3).map(tuple),
    data_regions=region_tuples,
    status=st.sampled_from(("active", "deprecated", "retired")),
)
PROPERTY = settings(max_examples=300, deadline=None)


@PROPERTY
@given(who=st.none() | callers, cap=gates, exact=st.booleans())
def test_release_allowed_only_when_every_rule_passes(who: Caller | None, cap: CapabilityGate, exact: bool) -> None:
    decision = decide_release(who, cap, exact_version=exact)
    visible = who is not None and (
        cap.visibility == "public" or who.tenant == cap.tenant or who.tenant in cap.shared_with
    )
    scoped = who is not None and all(s in who.scopes for s in cap.scopes)
    located = not cap.data_regions or (
        who is not None and who.regions is not None and any(r in who.regions for r in cap.data_regions)
    )
    assert (decision is None) == (visible and cap.status != "retired" and scoped and located)
    if not visible:
        assert decision == NOT_FOUND
    if decision is not None:
        assert decision.code in {"not_found", "retired", "insufficient_scope", "data_location_denied"}
        assert list(decision.missing_scopes) == sorted(decision.missing_scopes)


@PROPERTY
@given(who=callers, cap=gates)
def test_other_tenant_on_private_unshared_record_is_indistinguishable_from_missing(
    who: Caller, cap: CapabilityGate
) -> None:
    private = msgspec.structs.replace(
        cap,
        tenant=next(t for t in TENANTS if t != who.tenant),
        visibility="tenant",
        shared_with=tuple(t for t in cap.shared_with if t != who.tenant),
    )
    assert decide_release(who, private) == NOT_FOUND
    assert decide_release(who, private, exact_version=False) == NOT_FOUND
    assert decide_release(None, private) == NOT_FOUND


@PROPERTY
@given(who=callers, cap=gates, extra_scopes=scope_sets, extra_regions=region_tuples, exact=st.booleans())
def test_more_scopes_or_regions_never_turn_allow_into_deny(
    who: Caller, cap: CapabilityGate, extra_scopes: frozenset[str], extra_regions: tuple[str, ...], exact: bool
) -> None:
    before = decide_release(who, cap, exact_version=exact)
    more_scopes = msgspec.structs.replace(who, scopes=who.scopes | extra_scopes)
    more_regions = msgspec.structs.replace(who, regions=tuple(dict.fromkeys((*(who.regions or ()), *extra_regions))))
    both = msgspec.structs.replace(more_scopes, regions=more_regions.regions)
    if before is None:
        assert decide_release(more_scopes, cap, exact_version=exact) is None
        assert decide_release(more_regions, cap, exact_version=exact) is None
        assert decide_release(both, cap, exact_version=exact) is None


@st.composite
def parent_tickets(draw: st.DrawFn) -> ParentTicket:
    # Mostly well-formed chains; sometimes a forged one that already repeats an actor.
    chain = draw(
        st.lists(st.sampled_from(PRINCIPALS), unique=True, max_size=4)
        | st.lists(st.sampled_from(PRINCIPALS), max_size=4)
    )
    act: dict[str, object] | None = None
    for actor in reversed(chain):
        act = actor_chain(actor, act)
    on_behalf_of = draw(st.none() | st.sampled_from(("user-19", "user-20")))
    return ParentTicket(
        jti=draw(st.sampled_from(("t1", "t2"))),
        sub=on_behalf_of or (chain[0] if chain else "acme/frontend"),
        aud=draw(st.sampled_from(PRINCIPALS)),
        act=act,
        tenant=draw(st.sampled_from(TENANTS)),
        scopes=tuple(draw(st.lists(st.sampled_from(SCOPES), unique=True, max_size=4))),
        resources=tuple(draw(st.lists(st.sampled_from(("r1", "r2", "r3")), unique=True, max_size=3))),
        exp=NOW + draw(st.integers(-10, 1200)),
        depth=draw(st.integers(0, 5)),
        max_depth=draw(st.integers(-1, 4)),
        on_behalf_of=on_behalf_of,
    )


@st.composite
def redelegations(draw: st.DrawFn) -> tuple[Caller, TicketRequest, ParentTicket, tuple[str, ...]]:
    """Half arbitrary cases, half cases built to pass every rule; the oracle in the test decides which is which."""
    par = draw(parent_tickets())
    if not draw(st.booleans()):
        tenant, sub = draw(st.sampled_from((par.aud, *PRINCIPALS))).split("/")
        req = TicketRequest(
            audience="acme/billing-agent",
            skill="invoice.lookup",
            version="^2",
            scopes=tuple(draw(st.lists(st.sampled_from(SCOPES), min_size=1, max_size=4))),
            resources=tuple(draw(st.lists(st.sampled_from(("r1", "r2", "r3", "r4")), max_size=3))),
            on_behalf_of=draw(st.none() | st.sampled_from(("user-19", "user-20"))),
            ttl_seconds=draw(st.integers(1, 900)),
            max_depth=draw(st.integers(0, 10)),
        )
        capability_scopes = tuple(draw(st.lists(st.sampled_from(SCOPES), unique=True, max_size=5)))
        return Caller(tenant=tenant, sub=sub, scopes=draw(scope_sets)), req, par, capability_scopes
    # Repair the parent so that a narrowing child exists: live, delegable, non-empty scopes, audience outside the chain.
    earlier = actors_in_chain(par.act)
    unique_chain = len(set(earlier)) == len(earlier)
    audience = draw(st.sampled_from([p for p in PRINCIPALS if p not in earlier] or ["acme/newcomer"]))
    par = msgspec.structs.replace(
        par,
        aud=audience,
        act=par.act if unique_chain else {"sub": "acme/frontend"},
        exp=max(par.exp, NOW + 1),
        max_depth=max(par.max_depth, 1),
        scopes=par.scopes or ("invoice:read",),
    )
    tenant, sub = audience.split("/")
    req_scopes = draw(st.lists(st.sampled_from(par.scopes), min_size=1, max_size=3))
    if par.resources:
        resources = draw(st.lists(st.sampled_from(par.resources), min_size=1, max_size=3))
    else:
        resources = draw(st.lists(st.sampled_from(("r1", "r9")), max_size=2))
    req = TicketRequest(
        audience=draw(st.sampled_from(("acme/billing-agent", "globex/ledger"))),
        skill="invoice.lookup",
        version="^2",
        scopes=tuple(req_scopes),
        resources=tuple(resources),
        on_behalf_of=draw(st.sampled_from((None, par.on_behalf_of))),
        ttl_seconds=draw(st.integers(1, par.exp - NOW)),
        max_depth=draw(st.integers(0, par.max_depth - 1)),
    )
    capability_scopes = tuple(dict.fromkeys((*req_scopes, *draw(st.lists(st.sampled_from(SCOPES), max_size=3)))))
    return Caller(tenant=tenant, sub=sub, scopes=draw(scope_sets)), req, par, capability_scopes


def test_accepted_redelegation_never_widens_the_parent() -> None:
    accepted: list[bool] = []

    @PROPERTY
    @given(case=redelegations())
    def run(case: tuple[Caller, TicketRequest, ParentTicket, tuple[str, ...]]) -> None:
        who, req, par, capability_scopes = case
        refusal = check_redelegation(who, req, par, capability_scopes, now=NOW)
        chain = [who.principal, *actors_in_chain(par.act)]
        expected_ok = (
            par.exp > NOW
            and who.principal == par.aud
            and set(req.scopes) <= set(par.scopes) & set(capability_scopes)
            and (not par.resources or (bool(req.resources) and set(req.resources) <= set(par.resources)))
            and par.max_depth >= 1
            and req.max_depth <= par.max_depth - 1
            and NOW + req.ttl_seconds <= par.exp
            and (req.on_behalf_of is None or req.on_behalf_of == par.on_behalf_of)
            and len(set(chain)) == len(chain)
        )
        assert (refusal is None) == expected_ok, refusal
        if refusal is not None:
            assert isinstance(refusal, Refusal) and refusal.code == "delegation_denied"
            return
        accepted.append(True)
        child = child_ticket_grant(who, req, par, now=NOW)
        assert set(child.scopes) <= set(par.scopes)
        assert set(child.scopes) <= set(capability_scopes)
        assert not par.resources or (child.resources and set(child.resources) <= set(par.resources))
        assert child.depth == par.depth + 1
        assert child.max_depth < par.max_depth
        assert child.exp <= par.exp
        assert child.on_behalf_of == par.on_behalf_of
        assert child.parent == par.jti
        actors = actors_in_chain(child.act)
        assert actors[0] == who.principal
        assert actors[1:] == actors_in_chain(par.act)
        assert len(set(actors)) == len(actors)

    run()
    # The strategy must exercise the accepting path, not only refusals.
    assert len(accepted) >= 50


@PROPERTY
@given(
    who=callers,
    req_scopes=st.lists(st.sampled_from(SCOPES), min_size=1, max_size=4),
    capability_scopes=st.lists(st.sampled_from(SCOPES), max_size=4),
)
def test_first_ticket_never_exceeds_caller_or_capability(
    who: Caller, req_scopes: list[str], capability_scopes: list[str]
) -> None:
    req = request(scopes=tuple(req_scopes))
    refusal = check_first_ticket(who, req, capability_scopes)
    ok = set(req_scopes) <= set(capability_scopes) & who.scopes
    assert (refusal is None) == ok
    if ok:
        grant = first_ticket_grant(who, req, now=NOW)
        assert set(grant.scopes) <= who.scopes & set(capability_scopes)
        assert grant.depth == 0 and actors_in_chain(grant.act) == [who.principal]
    else:
        assert refusal is not None and refusal.reason == "scope_escalation"


# ---------------------------------------------------------------------------
# Publishing, lifecycle, heartbeats, revocation, introspection, approvals: properties


@PROPERTY
@given(who=callers, tenant=st.sampled_from(TENANTS), visible=st.booleans())
def test_cross_tenant_writes_are_never_allowed(who: Caller, tenant: str, visible: bool) -> None:
    if who.tenant == tenant:
        return
    assert check_publish(who, tenant) is not None
    assert check_lifecycle(who, tenant, agent_visible=visible) is not None
    assert check_heartbeat(who, tenant, agent_visible=visible) is not None


@PROPERTY
@given(who=callers, tenant=st.sampled_from(TENANTS), visible=st.booleans())
def test_a_missing_scope_is_never_allowed(who: Caller, tenant: str, visible: bool) -> None:
    if "registry:publish" not in who.scopes:
        assert check_publish(who, tenant) is not None
        assert check_heartbeat(who, tenant, agent_visible=visible) is not None
    if "registry:admin" not in who.scopes:
        assert check_lifecycle(who, tenant, agent_visible=visible) is not None
    for scope in SCOPES:
        assert (check_scope(who, scope) is None) == (scope in who.scopes)


@PROPERTY
@given(who=callers, tenant=st.sampled_from(TENANTS))
def test_an_invisible_record_is_not_found_before_anything_else(who: Caller, tenant: str) -> None:
    # 404 before 403: a caller who may not know a record exists learns nothing else about it.
    assert check_lifecycle(who, tenant, agent_visible=False).code == "not_found"
    if who.tenant != tenant and "registry:publish" in who.scopes:
        assert check_heartbeat(who, tenant, agent_visible=False).code == "not_found"
        assert check_heartbeat(who, tenant, agent_visible=True).code == "tenant_mismatch"


ticket_parties = st.builds(
    TicketParties,
    tenant=st.sampled_from(TENANTS),
    actor=st.sampled_from(PRINCIPALS),
    actor_tenant=st.sampled_from(TENANTS),
)


@PROPERTY
@given(who=callers, ticket=ticket_parties)
def test_revocation_by_the_minter_or_an_admin_of_the_capabilitys_tenant_only(
    who: Caller, ticket: TicketParties
) -> None:
    refusal = check_revoke(who, ticket)
    may = who.principal == ticket.actor or (who.tenant == ticket.tenant and "registry:admin" in who.scopes)
    assert (refusal is None) == may
    if not may and who.tenant not in (ticket.tenant, ticket.actor_tenant):
        assert refusal.code == "not_found"
    assert check_revoke(who, None).code == "not_found"


@PROPERTY
@given(who=callers, audience=st.sampled_from(PRINCIPALS), capability_tenant=st.sampled_from(TENANTS))
def test_introspection_only_in_the_audiences_tenant_or_by_its_auditors(
    who: Caller, audience: str, capability_tenant: str
) -> None:
    allowed = check_introspect(who, audience=audience, capability_tenant=capability_tenant) is None
    assert allowed == (
        who.tenant == audience.partition("/")[0] or (who.tenant == capability_tenant and "audit:read" in who.scopes)
    )


@PROPERTY
@given(who=callers, requester=st.sampled_from(PRINCIPALS), tenant=st.sampled_from(TENANTS))
def test_approvals_are_invisible_outside_their_parties_and_never_self_decided(
    who: Caller, requester: str, tenant: str
) -> None:
    parties = ApprovalParties(requester=requester, tenant=tenant)
    decider, reader = check_approval_decider(who, parties), check_approval_reader(who, parties)
    if who.principal != requester and who.tenant != tenant:
        assert decider.code == reader.code == "not_found"
    if who.principal == requester:
        assert decider is not None and decider.reason == "self_approval"
        assert reader is None
    if decider is None:
        assert who.tenant == tenant and "registry:admin" in who.scopes and who.principal != requester
    assert check_approval_decider(who, None).code == check_approval_reader(who, None).code == "not_found"


def test_an_approval_is_its_requesters_only_from_the_same_issuer() -> None:
    mine = msgspec.structs.replace(caller("acme"), issuer="capreg")
    partner = msgspec.structs.replace(caller("acme"), issuer="https://partner.example")
    parties = ApprovalParties(requester="acme/router", tenant="globex", requester_issuer="capreg")
    assert check_approval_reader(mine, parties) is None
    assert check_approval_reader(partner, parties).code == "not_found"
    # deciding stays refused as self-approval for the same principal, whatever its issuer
    assert check_approval_decider(partner, parties).reason == "self_approval"
    # approvals recorded before the issuer was kept match the principal alone
    assert check_approval_reader(partner, ApprovalParties(requester="acme/router", tenant="globex")) is None


@PROPERTY
@given(revoked=st.booleans(), status=st.sampled_from(("active", "deprecated", "retired")), expired=st.booleans())
def test_a_parent_stands_only_while_active(revoked: bool, status: str, expired: bool) -> None:
    active = not revoked and status != "retired" and not expired  # what db/tickets.py ACTIVE answers
    refusal = check_parent_standing(active=active, chain_revoked=revoked, capability_status=status)
    assert (refusal is None) == active
    assert refusal is None or (refusal.code, refusal.reason) == ("delegation_denied", "parent_invalid")


def test_every_refusal_code_has_one_status_and_insufficient_scope_its_challenge() -> None:
    from registry.core.error_codes import TABLE
    from registry.core.problems import refused

    refusals = [
        check_publish(caller("acme"), "acme"),
        check_publish(caller("acme", scopes=("registry:publish",)), "globex"),
        check_lifecycle(caller("acme"), "acme", agent_visible=False),
        RETIRED,
        DATA_LOCATION_DENIED,
        check_approval_decider(caller("acme"), ApprovalParties(requester="acme/router", tenant="acme")),
        scopes_missing("invoice:read", "invoice:write"),
    ]
    for refusal in refusals:
        error = refused(refusal)
        assert (error.status, error.code, error.detail) == (
            TABLE.of(refusal.code).status,
            refusal.code,
            refusal.message,
        )
        if refusal.code == "insufficient_scope":
            scope = " ".join(refusal.missing_scopes)
            assert error.headers["WWW-Authenticate"] == f'Bearer error="insufficient_scope", scope="{scope}"'
            assert error.missing_scopes == list(refusal.missing_scopes)
        else:
            assert "WWW-Authenticate" not in error.headers
