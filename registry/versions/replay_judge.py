"""The replay judge (docs/api.md#the-replay-gate): a candidate's replay report against every fixture
of its baseline, as pure functions. No I/O, no clock; `judge_report` runs in registry.core.bounded_work's
workers because it validates outputs against the registrant's output schema.

Per fixture, one verdict, the first that applies: `missing` (no result), `side_effect` (more side
effect observed than expected: a hard gate, whatever else holds), `outcome` (differs from the
expected one), `output` (an `ok` fixture with an expected output: the result must contain it and
validate against the candidate's outputSchema). Results for fixtures the baseline does not have
are ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal

import msgspec

from registry.core.problems import ErrorItem
from registry.core.records import OUTCOME_PATTERN, SIDE_EFFECT_ORDER, Fixture, SideEffect
from registry.core.schema_guard import MAX_VALUE_DEPTH, SchemaRejected, cached_validator
from registry.core.wire import Wire
from registry.versions.fixtures import first_difference, json_depth, schema_findings

MAX_RESULTS = 1000
OK = "ok"

Kind = Literal["missing", "outcome", "output", "side_effect"]


class ReplayResult(Wire, forbid_unknown_fields=True):
    """What running one fixture against the candidate gave."""

    fixture: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    outcome: Annotated[str, msgspec.Meta(pattern=OUTCOME_PATTERN)]
    side_effect: SideEffect
    output: Any | msgspec.UnsetType = msgspec.UNSET
    duration_ms: Annotated[int, msgspec.Meta(ge=0)] | None = None


class ReplayReport(Wire, forbid_unknown_fields=True):
    """`POST .../versions/{version}/replays`: the results of running the baseline's fixtures."""

    results: Annotated[list[ReplayResult], msgspec.Meta(max_length=MAX_RESULTS)]
    instance: Annotated[str, msgspec.Meta(max_length=256)] | None = None


class ReplayError(Wire):
    """One failing fixture: which, why (`kind`), and what was seen."""

    fixture: str
    kind: Kind
    message: str


# Whether an output satisfies the candidate's output schema: the findings (empty when it does).
OutputCheck = Callable[[Any], Sequence[str]]


def exceeds(observed: str, expected: str) -> bool:
    """Whether an observed side effect is above the expected one (none < idempotent < write < destructive)."""
    return SIDE_EFFECT_ORDER[observed] > SIDE_EFFECT_ORDER[expected]


def judge_fixture(fixture: Fixture, result: ReplayResult | None, output_check: OutputCheck) -> ReplayError | None:
    """The verdict on one fixture: None when it passes, else its one error."""
    name, expect = fixture.name, fixture.expect
    if result is None:
        return ReplayError(fixture=name, kind="missing", message="the report has no result for this fixture")
    if exceeds(result.side_effect, expect.side_effect):
        return ReplayError(
            fixture=name,
            kind="side_effect",
            message=f"observed side effect {result.side_effect}, at most {expect.side_effect} expected",
        )
    if result.outcome != expect.outcome:
        return ReplayError(
            fixture=name, kind="outcome", message=f"outcome {result.outcome!r}, {expect.outcome!r} expected"
        )
    if expect.outcome == OK and expect.output is not msgspec.UNSET:
        if result.output is msgspec.UNSET:
            return ReplayError(fixture=name, kind="output", message="no output; the fixture expects one")
        where = first_difference(expect.output, result.output)
        if where is not None:
            return ReplayError(
                fixture=name, kind="output", message=f"the output does not contain the expected one (at {where})"
            )
        findings = output_check(result.output)
        if findings:
            return ReplayError(
                fixture=name,
                kind="output",
                message="the output does not validate against the candidate's outputSchema: " + "; ".join(findings),
            )
    return None


def judge(fixtures: Sequence[Fixture], results: Sequence[ReplayResult], output_check: OutputCheck) -> list[ReplayError]:
    """Every failing fixture of the baseline, in fixture order (empty: the report passes)."""
    by_name = {result.fixture: result for result in results}
    verdicts = (judge_fixture(fixture, by_name.get(fixture.name), output_check) for fixture in fixtures)
    return [error for error in verdicts if error is not None]


def report_errors(report: ReplayReport) -> list[ErrorItem]:
    """Why a report cannot be judged at all (400): a fixture named twice, or nesting beyond bounds."""
    errors: list[ErrorItem] = []
    seen: set[str] = set()
    for index, result in enumerate(report.results):
        if result.fixture in seen:
            errors.append(
                ErrorItem(path=f"/results/{index}/fixture", message=f"fixture {result.fixture!r} has two results")
            )
        seen.add(result.fixture)
        if result.output is not msgspec.UNSET and json_depth(result.output) > MAX_VALUE_DEPTH:
            errors.append(
                ErrorItem(path=f"/results/{index}/output", message=f"nested deeper than {MAX_VALUE_DEPTH} levels")
            )
    return errors


def judge_report(
    fixtures: list[dict[str, Any]], report: ReplayReport, output_schema: Any
) -> tuple[list[ErrorItem], list[ReplayError]]:
    """The whole judgment of a report, for a worker process: the report's own errors (when any, it
    is not judged: 400), and the failing fixtures (none: passed)."""
    errors = report_errors(report)
    if errors:
        return errors, []
    try:
        validator = cached_validator(output_schema)
    except SchemaRejected:  # was valid when published; a stricter checker today fails closed
        validator = None

    def output_check(output: Any) -> Sequence[str]:
        return (
            ["the candidate's outputSchema cannot be used"] if validator is None else schema_findings(validator, output)
        )

    return [], judge(msgspec.convert(fixtures, list[Fixture]), report.results, output_check)
