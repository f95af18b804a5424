"""auth.policy.release_profile is all that decide_release reads of a caller: offers keep one
caller's decisions for every caller of the same profile, so a rule that reads more of the caller
(its subject, its issuer) must fail here until the profile names it too."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from auth.policy import CapabilityGate, decide_release, release_profile
from auth.principal import Caller

TENANTS = st.sampled_from(["acme", "globex"])
NAMES = st.sampled_from(["a", "b", "c"])
SCOPES = st.frozensets(st.sampled_from(["registry:read", "invoice:read", "invoice:write", "x:y"]), max_size=4)
REGIONS = st.none() | st.tuples() | st.lists(st.sampled_from(["eu", "us"]), max_size=2, unique=True).map(tuple)

gates = st.builds(
    CapabilityGate,
    tenant=TENANTS,
    visibility=st.sampled_from(["public", "tenant", "shared"]),
    shared_with=st.lists(TENANTS, max_size=2, unique=True).map(tuple),
    scopes=st.lists(st.sampled_from(["invoice:read", "invoice:write", "x:y"]), max_size=2, unique=True).map(tuple),
    data_regions=st.lists(st.sampled_from(["eu", "us", "apac"]), max_size=2, unique=True).map(tuple),
    status=st.sampled_from(["active", "deprecated", "retired", "candidate"]),
    ref=st.just("acme/a/s@1.0.0"),
)


@given(gates, TENANTS, SCOPES, REGIONS, NAMES, NAMES, st.booleans())
def test_equal_profiles_get_equal_decisions(gate, tenant, scopes, regions, sub_a, sub_b, exact):
    first = Caller(tenant=tenant, sub=sub_a, scopes=scopes, regions=regions, issuer="capreg")
    second = Caller(tenant=tenant, sub=sub_b, scopes=scopes, regions=regions, issuer="https://idp.example")
    assert release_profile(first) == release_profile(second)
    assert decide_release(first, gate, exact_version=exact) == decide_release(second, gate, exact_version=exact)


@given(TENANTS, TENANTS, SCOPES, SCOPES, REGIONS, REGIONS)
def test_profiles_differ_where_a_decision_can(tenant_a, tenant_b, scopes_a, scopes_b, regions_a, regions_b):
    a = Caller(tenant=tenant_a, sub="s", scopes=scopes_a, regions=regions_a)
    b = Caller(tenant=tenant_b, sub="s", scopes=scopes_b, regions=regions_b)
    same = (tenant_a, scopes_a, regions_a) == (tenant_b, scopes_b, regions_b)
    assert (release_profile(a) == release_profile(b)) == same
