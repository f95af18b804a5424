"""The replay gate, the service (docs/api.md#the-replay-gate): judging a candidate's replay report
(registry.versions.replay_judge, in a bounded worker) and, on a pass, releasing the candidate in the same
transaction as its verdict, its audit event and its change; listing a version's verdicts. Policy
is auth.policy's (`check_attest`, `check_replay_listing`), the SQL db/capabilities.py and
db/replays.py.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import msgspec

from auth.policy import NOT_FOUND, check_attest, check_replay_listing
from auth.principal import Caller
from db import agents as agent_queries
from db import capabilities as capability_queries
from db import replays as replay_queries
from db.group_commit import WriteScope
from db.replays import StoredReplay
from registry.core import error_codes as codes
from registry.core.bounded_checks import bounded
from registry.core.problems import ErrorItem, ProblemError, invalid_request, refused
from registry.core.records import PublicCapability, capability_ref
from registry.core.tracing import current_request_id
from registry.core.wire import Wire
from registry.discovery.service import public_capability
from registry.operations.audit_events import caller_event
from registry.state import Registry
from registry.versions.lifecycle import VersionKey
from registry.versions.replay_judge import ReplayError, ReplayReport, judge_report
from registry.versions.semver import InvalidVersion, Version

REPLAYED = "version.replayed"
PUBLISHED = "version.published"
# The verdicts GET .../replays answers, newest first.
MAX_LISTED = 200


class ReplayVerdict(Wire):
    """`200` of a passing report: the candidate, now active."""

    verdict: Literal["passed"]
    version: PublicCapability


class JudgedReplay(Wire):
    """One judged report, as GET .../replays lists it."""

    at: datetime
    actor: str
    verdict: Literal["passed", "failed"]
    errors: list[ReplayError]


class ReplayList(Wire):
    items: list[JudgedReplay]


def not_candidate(ref: str) -> ProblemError:
    return ProblemError(
        codes.NOT_CANDIDATE, f"{ref} is not a candidate: only a candidate version is judged by a replay"
    )


def replay_failed(failures: list[ReplayError]) -> ProblemError:
    """`422 replay_failed`, one error per failing fixture."""
    return ProblemError(
        codes.REPLAY_FAILED,
        f"{len(failures)} of the baseline's fixtures failed; the version stays a candidate",
        errors=[ErrorItem(fixture=f.fixture, kind=f.kind, message=f.message) for f in failures],
    )


def _exact(key: VersionKey) -> ProblemError | None:
    try:
        Version.parse(key.version)
    except InvalidVersion:
        return invalid_request(
            "a replay names an exact version", [ErrorItem(path="version", message="not a semantic version")]
        )
    return None


async def submit(
    registry: Registry, caller: Caller, key: VersionKey, report: ReplayReport, *, trace_id: str | None
) -> ReplayVerdict:
    """Judge `report` against every fixture of the candidate's baseline; release the candidate when
    all pass, else answer 422 `replay_failed` (it stays a candidate). Every verdict and refusal is
    audited as `version.replayed`."""
    tenant, agent_id, skill_id, version = key.tenant, key.agent_id, key.skill_id, key.version
    ref = capability_ref(tenant, agent_id, skill_id, version)
    request_id = current_request_id()  # the write below runs in the group-commit task

    def refusing(error: ProblemError) -> ProblemError:
        return error.about(tenant=tenant, ref=ref)

    refusal = check_attest(caller, tenant)
    if refusal is not None:
        raise refusing(refused(refusal))
    if (inexact := _exact(key)) is not None:
        raise refusing(inexact)
    subject = await capability_queries.replay_subject(registry.pool, tenant, agent_id, skill_id, version)
    if subject is None:
        raise refusing(refused(NOT_FOUND))
    if subject.status != "candidate":
        raise refusing(not_candidate(ref))
    problems, failures = await bounded(
        judge_report,
        list(subject.baseline_fixtures or []),
        report,
        subject.output_schema,
        what="judging the replay report",
    )
    if problems:
        raise refusing(invalid_request("the replay report cannot be judged", problems))

    async def write(scope: WriteScope) -> None:
        # The agent's lock before the version's row: the order registration takes them in
        # (db.capabilities.refresh_latest re-derives the latest marker under it).
        await agent_queries.lock_agent(scope.conn, tenant, agent_id)
        status = await capability_queries.lock_version_status(scope.conn, tenant, agent_id, skill_id, version)
        if status is None:
            raise refused(NOT_FOUND)
        if status != "candidate":  # released or retired by another request meanwhile
            raise not_candidate(ref)
        await replay_queries.insert_replay(
            scope.conn,
            {
                "tenant": tenant,
                "agent_id": agent_id,
                "skill_id": skill_id,
                "version": version,
                "baseline": subject.baseline,
                "actor": caller.sub,
                "actor_issuer": caller.issuer,
                "instance": report.instance,
                "verdict": "failed" if failures else "passed",
                "errors": msgspec.to_builtins(failures),
            },
        )
        scope.audit(
            caller_event(
                caller,
                REPLAYED,
                outcome="denied" if failures else "allowed",
                tenant=tenant,
                ref=ref,
                reason=codes.REPLAY_FAILED.code if failures else None,
                trace_id=trace_id,
                request_id=request_id,
            )
        )
        if not failures:
            await capability_queries.release_candidate(
                scope.conn, tenant, agent_id, skill_id, version, now=registry.clock.now()
            )
            scope.change(PUBLISHED, tenant, agent_id, ref)  # announced now, as if published now

    try:
        await registry.writes.run(write)
    except ProblemError as error:
        raise refusing(error) from None
    if failures:
        failed = replay_failed(failures)
        failed.audited = True  # recorded with the verdict
        raise failed
    rows = await capability_queries.skill_versions(registry.pool, tenant, agent_id, skill_id)
    return ReplayVerdict(verdict="passed", version=public_capability(next(r for r in rows if r.version == version)))


async def verdicts(registry: Registry, caller: Caller, key: VersionKey, *, trace_id: str | None) -> ReplayList:
    """The version's judged reports, newest first (at most MAX_LISTED); own tenant only."""
    ref = capability_ref(key.tenant, key.agent_id, key.skill_id, key.version)

    def refusing(error: ProblemError) -> ProblemError:
        return error.about(tenant=key.tenant, ref=ref)

    refusal = check_replay_listing(caller, key.tenant)
    if refusal is not None:
        raise refusing(refused(refusal))
    if (error := _exact(key)) is not None:
        raise refusing(error)
    if (
        await capability_queries.version_status(registry.pool, key.tenant, key.agent_id, key.skill_id, key.version)
        is None
    ):
        raise refusing(refused(NOT_FOUND))
    rows = await replay_queries.replays_of(
        registry.pool, key.tenant, key.agent_id, key.skill_id, key.version, limit=MAX_LISTED
    )
    return ReplayList(items=[_judged(row) for row in rows])


def _judged(row: StoredReplay) -> JudgedReplay:
    return JudgedReplay(
        at=row.at, actor=row.actor, verdict=row.verdict, errors=msgspec.convert(row.errors, list[ReplayError])
    )
