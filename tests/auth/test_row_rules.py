"""The rules over one row (auth.policy.VISIBLE, IN_FORCE) and the order of a skill's versions
(LATEST_ORDER), pure: what docs/api.md#visibility and #version-selection say, for any row, viewer,
moment and set of versions; and what their SQL reading looks like."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from auth.policy import EFFECTIVE, IN_FORCE, LATEST_ORDER, VISIBLE, CapabilityGate, decide_release
from auth.principal import Caller
from registry.versions.semver import Version

tenants = st.sampled_from(["t1", "t2", "t3"])
moments = (
    st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1), timezones=st.just(UTC)) | st.none()
)
statuses = st.sampled_from(["active", "deprecated", "retired", "candidate"])


@given(st.sampled_from(["public", "tenant"]), tenants, st.lists(tenants, max_size=3), tenants | st.none())
def test_visible_is_public_own_or_shared(visibility, owner, shared, viewer):
    row = {"visibility": visibility, "tenant": owner, "shared_with": shared}
    expected = visibility == "public" or (viewer is not None and (viewer == owner or viewer in shared))
    assert VISIBLE.holds(row, viewer=viewer) is expected


@given(st.sampled_from(["public", "tenant"]), tenants, st.lists(tenants, max_size=3), tenants)
def test_release_refuses_exactly_what_is_invisible_as_not_found(visibility, owner, shared, viewer):
    """decide_release's first check is VISIBLE: an invisible version is not_found whatever else holds."""
    gate = CapabilityGate(tenant=owner, visibility=visibility, shared_with=tuple(shared))
    refusal = decide_release(Caller(tenant=viewer, sub="r"), gate)
    visible = VISIBLE.holds(gate, viewer=viewer)
    assert (refusal is not None and refusal.code == "not_found") is not visible


@given(
    statuses,
    moments,
    moments.filter(lambda m: m is not None),
    st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3650)),
)
def test_in_force_is_not_withdrawn_and_effective_and_stays_so(status, effective_at, now, later):
    row = SimpleNamespace(status=status, effective_at=effective_at)
    in_force = IN_FORCE.holds(row, now=now)
    assert in_force is (status in ("active", "deprecated") and (effective_at is None or effective_at <= now))
    assert EFFECTIVE.holds(row, now=now) is (effective_at is None or effective_at <= now)
    if in_force:  # time passing never takes a version out of force (only a write does)
        assert IN_FORCE.holds(row, now=now + later)


def test_sql_reading_binds_the_viewer_and_the_moment_and_folds_an_anonymous_viewer():
    assert VISIBLE.sql("a", viewer="$3") == (
        "(a.visibility = 'public' OR a.tenant = $3::text OR $3::text = ANY (a.shared_with))"
    )
    assert VISIBLE.sql("a", viewer=None) == "(a.visibility = 'public')"
    assert IN_FORCE.sql("c", now="$1") == (
        "((c.status <> 'retired' AND c.status <> 'candidate')"
        " AND (c.effective_at IS NULL OR c.effective_at <= $1::timestamptz))"
    )
    assert "now()" not in IN_FORCE.sql("l", now="$9")


def test_a_rule_takes_exactly_its_parameters():
    with pytest.raises(TypeError):
        VISIBLE.holds({"visibility": "public", "tenant": "t", "shared_with": []})
    with pytest.raises(TypeError):
        IN_FORCE.sql("c", now="$1", viewer="$2")


_VERSIONS = st.builds(
    lambda core, pre, build: core + (f"-{pre}" if pre else "") + (f"+{build}" if build else ""),
    st.sampled_from(["0.9.0", "1.0.0", "1.0.1", "1.10.0", "2.0.0"]),
    st.sampled_from(["", "rc.1", "rc.10", "rc.2", "alpha", "1"]),
    st.sampled_from(["", "a", "b", "B"]),
)


@given(st.lists(_VERSIONS, min_size=1, max_size=8, unique=True))
def test_latest_is_the_newest_release_else_the_newest_pre_release_builds_by_text(versions):
    parsed = {v: Version.parse(v) for v in versions}
    rows = [{"prerelease": p.is_prerelease, "version_key": p.sort_key(), "version": v} for v, p in parsed.items()]
    latest = LATEST_ORDER.first(rows)["version"]
    pool = [v for v, p in parsed.items() if not p.is_prerelease] or versions
    newest = max(parsed[v] for v in pool)
    same = [v for v in pool if not (parsed[v] < newest or newest < parsed[v])]
    assert latest == max(same, key=str.encode)
