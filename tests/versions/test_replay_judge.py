"""The replay judge's rules (registry.versions.replay_judge), pure: properties over generated fixtures and reports."""

from __future__ import annotations

import copy

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from registry.core.records import SIDE_EFFECT_ORDER, Fixture, FixtureExpectation
from registry.versions.replay_judge import ReplayReport, ReplayResult, judge, judge_report

SIDE_EFFECTS = list(SIDE_EFFECT_ORDER)
names = st.from_regex(r"^[a-z0-9][a-z0-9._-]{0,12}$", fullmatch=True)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-10, 10)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=12,
)
objects = st.dictionaries(st.text(max_size=4), json_values, max_size=4)
outcomes = st.sampled_from(["ok", "ok", "not_found", "business_rejected"])


@st.composite
def fixtures(draw) -> list[Fixture]:
    chosen = draw(st.lists(names, min_size=1, max_size=5, unique=True))
    made = []
    for name in chosen:
        outcome = draw(outcomes)
        output = draw(objects) if outcome == "ok" and draw(st.booleans()) else msgspec.UNSET
        made.append(
            Fixture(
                name=name,
                input={},
                expect=FixtureExpectation(
                    outcome=outcome, side_effect=draw(st.sampled_from(SIDE_EFFECTS)), output=output
                ),
            )
        )
    return made


def passing_results(draw, made: list[Fixture]) -> list[ReplayResult]:
    """A result per fixture that passes: the expected outcome and output, a side effect at most the expected one."""
    results = []
    for fixture in made:
        bound = SIDE_EFFECT_ORDER[fixture.expect.side_effect]
        observed = draw(st.sampled_from(SIDE_EFFECTS[: bound + 1]))
        output = (
            copy.deepcopy(fixture.expect.output)
            if fixture.expect.output is not msgspec.UNSET
            else draw(st.none() | objects)
        )
        results.append(
            ReplayResult(fixture=fixture.name, outcome=fixture.expect.outcome, side_effect=observed, output=output)
        )
    return results


def no_findings(output) -> list[str]:
    return []


def with_extra_members(draw, value):
    """`value` with members added to its objects, at any depth (arrays stay as they are: they must be equal)."""
    if not isinstance(value, dict):
        return value
    grown = {key: with_extra_members(draw, item) for key, item in value.items()}
    for key, item in draw(st.dictionaries(st.text(max_size=6), json_values, max_size=3)).items():
        grown.setdefault(key, item)
    return grown


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_a_passing_report_stays_passing_with_extra_members_in_outputs(data):
    made = data.draw(fixtures())
    results = passing_results(data.draw, made)
    assert judge(made, results, no_findings) == []
    grown = [msgspec.structs.replace(r, output=with_extra_members(data.draw, r.output)) for r in results]
    assert judge(made, grown, no_findings) == []


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_any_side_effect_above_the_expectation_fails_whatever_else_holds(data):
    made = data.draw(fixtures())
    results = passing_results(data.draw, made)
    raisable = [i for i, f in enumerate(made) if f.expect.side_effect != "destructive"]
    if not raisable:
        return
    index = data.draw(st.sampled_from(raisable))
    bound = SIDE_EFFECT_ORDER[made[index].expect.side_effect]
    results[index] = msgspec.structs.replace(
        results[index], side_effect=data.draw(st.sampled_from(SIDE_EFFECTS[bound + 1 :]))
    )
    errors = judge(made, results, no_findings)
    assert [(e.fixture, e.kind) for e in errors] == [(made[index].name, "side_effect")]


@settings(max_examples=50, deadline=None)
@given(st.data())
def test_unknown_results_are_ignored_and_missing_ones_fail(data):
    made = data.draw(fixtures())
    results = passing_results(data.draw, made)
    known = {f.name for f in made}
    extra = [ReplayResult(fixture="zz-" + name, outcome="boom", side_effect="destructive") for name in known]
    assert judge(made, results + extra, no_findings) == []
    dropped = data.draw(st.sampled_from(range(len(made))))
    remaining = [r for r in results if r.fixture != made[dropped].name]
    assert [(e.fixture, e.kind) for e in judge(made, remaining, no_findings)] == [(made[dropped].name, "missing")]


def test_containment_and_json_equality():
    expect = Fixture(
        name="a",
        input={},
        expect=FixtureExpectation(outcome="ok", side_effect="none", output={"n": 1, "xs": [1, {"b": True}]}),
    )
    ok = ReplayResult(
        fixture="a", outcome="ok", side_effect="none", output={"n": 1.0, "xs": [1, {"b": True}], "more": 2}
    )
    assert judge([expect], [ok], no_findings) == []
    for output in ({"n": True, "xs": [1, {"b": True}]}, {"n": 1, "xs": [1, {"b": True, "c": 1}]}, {"n": 1}, [1], None):
        failing = msgspec.structs.replace(ok, output=output)
        assert [e.kind for e in judge([expect], [failing], no_findings)] == ["output"], output
    assert [e.kind for e in judge([expect], [msgspec.structs.replace(ok, outcome="not_found")], no_findings)] == [
        "outcome"
    ]
    assert [e.kind for e in judge([expect], [ok], lambda output: ["at /n: wrong"])] == ["output"]


def test_judge_report_validates_outputs_against_the_schema():
    fixture = {"name": "a", "input": {}, "expect": {"outcome": "ok", "sideEffect": "none", "output": {"n": 1}}}
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "extra": {"type": "string"}}}
    good = ReplayReport(
        results=[ReplayResult(fixture="a", outcome="ok", side_effect="none", output={"n": 1, "extra": "x"})]
    )
    assert judge_report([fixture], good, schema) == ([], [])
    bad = ReplayReport(
        results=[ReplayResult(fixture="a", outcome="ok", side_effect="none", output={"n": 1, "extra": 5})]
    )
    problems, failures = judge_report([fixture], bad, schema)
    assert problems == [] and [(f.fixture, f.kind) for f in failures] == [("a", "output")]
    assert "outputSchema" in failures[0].message


# --- Who may know of a candidate (auth.policy) -----------------------------------------------------

tenants = st.sampled_from(["acme", "globex", "initech"])


@settings(max_examples=60, deadline=None)
@given(
    owner=tenants,
    viewer=tenants,
    visibility=st.sampled_from(["public", "tenant"]),
    shared=st.booleans(),
    exact=st.booleans(),
    attest=st.booleans(),
)
def test_a_candidate_exists_only_for_its_own_tenant(owner, viewer, visibility, shared, exact, attest):
    from auth.policy import NOT_FOUND, CapabilityGate, check_attest, decide_release
    from auth.principal import Caller

    caller = Caller(tenant=viewer, sub="ci", scopes=frozenset({"registry:attest"} if attest else set()))
    gate = CapabilityGate(
        tenant=owner, visibility=visibility, shared_with=(viewer,) if shared else (), status="candidate"
    )
    released = decide_release(caller, gate, exact_version=exact)
    attested = check_attest(caller, owner)
    if viewer != owner:  # shared or public makes no difference: for anyone else it does not exist
        assert released == NOT_FOUND and attested == NOT_FOUND
    else:
        assert released is None
        assert attested is None if attest else attested.code == "insufficient_scope"
