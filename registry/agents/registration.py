"""Registration: turning a PUT body into immutable capability versions, in one transaction.

The pure part (parse, normalize, validate, hash, compare: registry.agents.preparation) runs in a
worker process (registry.core.bounded_work, `prepare_registration`, `compare_versions`);
`apply_registration` writes it.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

import msgspec

from auth.principal import Caller
from db import agents as agent_queries
from db import capabilities as capability_queries
from db import signatures as signature_queries
from db.capabilities import VersionContractRow
from db.changes import CANDIDATE_CHANGE_KIND
from db.group_commit import WriteScope
from registry.agents.preparation import (
    CompatibilityVerdict,
    PreparedRegistration,
    PreparedSkill,
    incompatibilities,
    prepare_registration_outcome,
)
from registry.core import error_codes as codes
from registry.core.bounded_checks import bounded
from registry.core.problems import ErrorItem, ProblemError, invalid_request
from registry.core.records import (
    MAX_AGENT_CONTENT_BYTES,
    MAX_SKILLS,
    SIDE_EFFECT_ORDER,
    AgentRegistration,
    SkillRegistration,
    agent_ref,
    capability_ref,
)
from registry.core.search_words import capability_words
from registry.core.wire import Wire
from registry.operations.audit_events import caller_event
from registry.versions.compatibility.verdict import baseline
from registry.versions.contracts import skill_content, skill_contract
from registry.versions.fixtures import fixtures_content
from registry.versions.semver import Version

# The change recorded for a new candidate (and its retirement): never shown by the feed (db.changes).
CANDIDATE_CHANGE = CANDIDATE_CHANGE_KIND


class VersionRef(Wire):
    id: str
    version: str


class CandidateRef(Wire):
    """A new version stored as a candidate: its baseline's fixtures must pass a replay first."""

    id: str
    version: str
    baseline: str
    fixtures: int


# Part of every registration digest: bump it whenever validation or normalization of a registration
# changes, so that bodies accepted under the old rules go through the full path again once.
_REGISTRATION_RULES = "capreg-registration-rules-3"  # 2: behaviour fixtures; 3: endpoint URLs checked


def registration_digest(body: bytes) -> str:
    """The hash of a registration body's bytes, as received.

    Equal to the agent's stored hash means: these exact bytes were the last registration applied,
    and every write since that could make them do something again (a card change or a new
    version, each of which stores its own body's hash) has not happened, so sending them again
    changes nothing. Agents re-register at every start with the same bytes; a body with the same
    content in other bytes takes the full path once and then becomes the stored hash. Cheap: the
    body is not even decoded.
    """
    return hashlib.sha256(_REGISTRATION_RULES.encode() + b"\0" + body).hexdigest()


async def prepare_registration(registration: AgentRegistration) -> PreparedRegistration:
    """`prepare_registration_now` in a worker process (registry.core.bounded_work): schema compilation
    runs off the event loop, within a deadline (past it: 400 `invalid_request`)."""
    outcome = await bounded(prepare_registration_outcome, registration, what="checking the registration")
    if isinstance(outcome, PreparedRegistration):
        return outcome
    detail, errors = outcome
    raise invalid_request(detail, errors)


def _search_text(skill: SkillRegistration) -> str:
    """The stored copy of the words the engine searches (registry.core.search_words), lower-cased."""
    return " ".join(capability_words(skill.id, skill.name, skill.tags, skill.description)).lower()


def _version_row(tenant: str, agent_id: str, prepared: PreparedSkill) -> dict[str, Any]:
    skill = prepared.skill
    return {
        "tenant": tenant,
        "agent_id": agent_id,
        "skill_id": skill.id,
        "version": skill.version,
        "version_key": prepared.version.sort_key(),
        "prerelease": prepared.version.is_prerelease,
        "name": skill.name,
        "description": skill.description,
        "tags": list(skill.tags),
        "scopes": sorted(set(skill.scopes)),
        "side_effect": skill.side_effect,
        "side_effect_rank": SIDE_EFFECT_ORDER[skill.side_effect],
        "requires_approval": prepared.requires_approval,
        "data_regions": sorted(set(skill.data_regions)),
        "slo": msgspec.to_builtins(skill.slo) if skill.slo is not None else None,
        "examples": list(skill.examples),
        "fixtures": fixtures_content(skill),
        "fixture_count": len(skill.fixtures),
        "input_schema": skill.input_schema,
        "output_schema": skill.output_schema,
        "input_modes": list(skill.input_modes),
        "output_modes": list(skill.output_modes),
        "effective_at": skill.effective_at,
        "content_hash": prepared.content_hash,
        "search_text": _search_text(skill),
    }


_size_encoder = msgspec.json.Encoder()


def skill_content_size(row: dict[str, Any]) -> int:
    """The bytes of a new version's shown content (db.capabilities.SHOWN_CONTENT_COLUMNS, as JSON)."""
    return len(_size_encoder.encode([row[column] for column in capability_queries.SHOWN_CONTENT_COLUMNS]))


def agent_bound_errors(stored_sizes: dict[str, int], new_rows: list[dict[str, Any]]) -> list[ErrorItem]:
    """What the agent would hold past its bounds once `new_rows` are stored (records.MAX_SKILLS skills
    with a version not retired, MAX_AGENT_CONTENT_BYTES of their content): the skills a PUT leaves
    out are kept, so the bound is on the sum, not on one body."""
    sizes = dict(stored_sizes)
    for row in new_rows:
        sizes[row["skill_id"]] = max(sizes.get(row["skill_id"], 0), skill_content_size(row))
    errors = []
    if len(sizes) > MAX_SKILLS:
        errors.append(
            ErrorItem(
                path="/skills",
                message=f"the agent would hold {len(sizes)} skills with versions not retired, more than "
                f"the {MAX_SKILLS} allowed per agent (skills left out of a registration are kept: "
                "retire one before adding another)",
            )
        )
    total = sum(sizes.values())
    if total > MAX_AGENT_CONTENT_BYTES:
        errors.append(
            ErrorItem(
                path="/skills",
                message=f"the agent's skills would hold about {total} bytes of content, more than the "
                f"{MAX_AGENT_CONTENT_BYTES} allowed per agent (kept across registrations: retire versions "
                "or publish smaller schemas)",
            )
        )
    return errors


def has_neighbours(stored: list[VersionContractRow], new_skills: list[PreparedSkill]) -> bool:
    """Whether any new version has another version of its skill to be compared with: a stored one
    that is not retired (`stored`: version_contracts' rows), or one earlier in the same body. Without
    one, `incompatibilities` has nothing to compare and finds nothing (a new agent's first skills)."""
    skills = [p.skill.id for p in new_skills]
    known = {row.skill_id for row in stored}
    return len(set(skills)) < len(skills) or any(skill_id in known for skill_id in skills)


async def compare_versions(
    existing: list[tuple[str, Version, dict]], new: list[tuple[int, str, Version, dict]]
) -> list[ErrorItem]:
    """`incompatibilities` in a worker process (registry.core.bounded_work), within a deadline."""
    return await bounded(incompatibilities, existing, new, what="comparing the new versions with the published ones")


def _compatibility_inputs(
    stored: list[VersionContractRow], prepared: PreparedRegistration, new_skills: list[PreparedSkill]
) -> tuple[list, list]:
    """`incompatibilities`' arguments, in a stable order (so two reads of the same state compare equal)."""
    existing = sorted(
        ((r.skill_id, Version.parse(r.version), skill_contract(r)) for r in stored),
        key=lambda item: (item[0], item[1].sort_key()),
    )
    new = [(prepared.skills.index(p), p.skill.id, p.version, skill_content(p.skill)) for p in new_skills]
    return existing, new


async def check_compatibility_ahead(pool: Any, tenant: str, agent_id: str, prepared: PreparedRegistration) -> None:
    """Compare the registration with the published versions before its write, in a worker process
    (registry.core.bounded_work), and keep the verdict on `prepared`: the write, inside a transaction
    shared with other requests, then only checks that nothing changed in between instead of
    comparing schemas itself."""
    hashes = await capability_queries.content_hashes(pool, tenant, agent_id)
    new_skills = [p for p in prepared.skills if p.identity not in hashes]
    if not new_skills:
        return
    # No stored version at all (a new agent): nothing to read (every version, retired ones too, has a hash).
    stored = await capability_queries.version_contracts(pool, tenant, agent_id) if hashes else []
    if not has_neighbours(stored, new_skills):
        return  # nothing to compare: the write finds the same (apply_registration)
    existing, new = _compatibility_inputs(stored, prepared, new_skills)
    breaking = await compare_versions(existing, new)
    prepared.verdict = CompatibilityVerdict(existing, new, breaking)


class RegistrationResult(msgspec.Struct):
    created: bool
    published: list[VersionRef]
    unchanged: list[VersionRef]
    candidates: list[CandidateRef] = []


def candidate_baselines(
    stored: list[VersionContractRow], new_skills: list[PreparedSkill]
) -> dict[tuple[str, str], CandidateRef]:
    """Which new versions are candidates: those whose baseline (registry.versions.compatibility.verdict.baseline) has
    fixtures. The baseline is chosen among released versions (stored ones neither retired nor
    candidates, and new ones of the same request that are not candidates themselves), so a chain
    of candidates without fixtures can never step around a baseline's fixtures."""
    released: dict[str, list[tuple[Version, int]]] = {}
    for row in stored:
        if row.status != "candidate":
            released.setdefault(row.skill_id, []).append((Version.parse(row.version), row.fixture_count))
    found: dict[tuple[str, str], CandidateRef] = {}
    for prepared in sorted(new_skills, key=lambda p: (p.skill.id, p.version)):
        skill = prepared.skill
        chosen = baseline(prepared.version, released.get(skill.id, []))
        if chosen is not None and chosen[1] > 0:
            found[(skill.id, skill.version)] = CandidateRef(
                id=skill.id, version=skill.version, baseline=str(chosen[0]), fixtures=chosen[1]
            )
        else:
            released.setdefault(skill.id, []).append((prepared.version, len(skill.fixtures)))
    return found


async def apply_registration(
    scope: WriteScope,
    caller: Caller,
    tenant: str,
    agent_id: str,
    prepared: PreparedRegistration,
    *,
    trace_id: str | None,
    request_id: str | None = None,
    max_agents: int = 0,
    now: datetime,
) -> RegistrationResult:
    """Write a prepared registration as one write of a group commit (db.group_commit): raises
    ProblemError on a conflict or a bound passed, and its savepoint rolls back with nothing applied.
    `max_agents`: the tenant's most agents (CAPREG_MAX_AGENTS_PER_TENANT; 0: none)."""
    conn = scope.conn
    reg = prepared.registration
    fields = {
        "name": reg.name,
        "description": reg.description,
        "version": reg.version,
        "provider": msgspec.to_builtins(reg.provider) if reg.provider is not None else None,
        "visibility": reg.visibility,
        "shared_with": sorted(set(reg.shared_with)),
        "card": prepared.card,
        "card_hash": prepared.card_hash,
    }
    ref_of_agent = agent_ref(tenant, agent_id)

    await agent_queries.lock_agent(conn, tenant, agent_id)
    restored = await agent_queries.restore_withdrawn(conn, tenant, agent_id)
    existing = await agent_queries.get_agent(conn, tenant, agent_id)
    created = existing is None
    if existing is not None and existing.publisher_kid is not None and prepared.publisher_kid is None:
        # Registered signed by a concurrent request since the signature check: no downgrade.
        raise ProblemError(
            codes.SIGNATURE_REQUIRED,
            "this agent was registered with a publisher signature: every later registration must be signed too",
        )
    agent_changed = (
        existing is None
        or restored
        or (
            existing.card_hash != prepared.card_hash
            or existing.visibility != fields["visibility"]
            or list(existing.shared_with) != fields["shared_with"]
            or (prepared.publisher_kid is not None and existing.publisher_kid != prepared.publisher_kid)
        )
    )
    if created and max_agents and await agent_queries.tenant_agents_reach(conn, tenant, max_agents):
        # Under the agent's lock only: concurrent creations of other agents may pass it by a few.
        raise invalid_request(
            f"tenant {tenant} already has {max_agents} agents, the most one tenant may register "
            "(CAPREG_MAX_AGENTS_PER_TENANT); update an existing agent instead"
        )
    if created:  # with the registration applied (the others write it last: record_registration)
        await agent_queries.insert_agent(
            conn,
            tenant,
            agent_id,
            fields
            | {
                "registration_body": prepared.body,
                "publisher_kid": prepared.publisher_kid,
                "registration_hash": prepared.body_hash,
            },
        )
    elif agent_changed:
        await agent_queries.update_agent(conn, tenant, agent_id, fields)
    if agent_changed:
        # The reason of an applied registration is the kid of its publisher signature (None: unsigned).
        scope.audit(
            caller_event(
                caller,
                "agent.registered",
                tenant=tenant,
                ref=ref_of_agent,
                reason=prepared.publisher_kid,
                trace_id=trace_id,
                request_id=request_id,
            )
        )
        scope.change("agent.registered", tenant, agent_id, ref_of_agent)

    # A new agent has no versions to read: they reference its row, which did not exist under its lock.
    hashes = {} if created else await capability_queries.content_hashes(conn, tenant, agent_id)
    conflicts: list[ErrorItem] = []
    published: list[VersionRef] = []
    unchanged: list[VersionRef] = []
    new_skills: list[PreparedSkill] = []
    for index, skill in enumerate(prepared.skills):
        ref = VersionRef(id=skill.skill.id, version=skill.skill.version)
        stored = hashes.get(skill.identity)
        if stored is None:
            new_skills.append(skill)
            published.append(ref)
        elif stored == (skill.skill.version, skill.content_hash):
            unchanged.append(ref)
        elif stored[0] != skill.skill.version:
            # A build of a published precedence (1.0.0+hotfix beside 1.0.0) is that version again, not a
            # new one: as a version of its own it would skip the compatibility check and the replay gate.
            conflicts.append(
                ErrorItem(
                    path=f"/skills/{index}/version",
                    message=f"{skill.skill.id}@{skill.skill.version} has the precedence of the published "
                    f"{skill.skill.id}@{stored[0]}: versions that differ only in build metadata are one "
                    "version; publish a new version",
                )
            )
        else:
            conflicts.append(
                ErrorItem(
                    path=f"/skills/{index}",
                    message=f"{skill.skill.id}@{skill.skill.version} is already published with different content; publish a new version",
                )
            )
    if conflicts:
        raise ProblemError(codes.VERSION_CONFLICT, "published versions are immutable", errors=conflicts)
    candidates: dict[tuple[str, str], CandidateRef] = {}
    stored_versions: list[VersionContractRow] = []
    if new_skills:
        stored_versions = [] if created else await capability_queries.version_contracts(conn, tenant, agent_id)
        candidates = candidate_baselines(stored_versions, new_skills)
        breaking: list[ErrorItem] = []
        if has_neighbours(stored_versions, new_skills):
            existing_contracts, new_contracts = _compatibility_inputs(stored_versions, prepared, new_skills)
            verdict = prepared.verdict
            if verdict is not None and verdict.existing == existing_contracts and verdict.new == new_contracts:
                breaking = verdict.breaking
            else:  # published versions changed since `check_compatibility_ahead` (or it did not run)
                breaking = await compare_versions(existing_contracts, new_contracts)
        if breaking:
            raise ProblemError(
                codes.INCOMPATIBLE_CHANGE,
                "a new minor or patch version must stay compatible with the versions before it",
                errors=breaking,
            )
    rows = []
    for skill in new_skills:
        row = _version_row(tenant, agent_id, skill)
        candidate = candidates.get((skill.skill.id, skill.skill.version))
        row["status"] = "candidate" if candidate else "active"
        row["baseline"] = candidate.baseline if candidate else None
        rows.append(row)
    if rows:
        # Under the agent's lock, so concurrent registrations of one agent cannot pass the bound together.
        stored_sizes = {} if created else await capability_queries.skill_content_sizes(conn, tenant, agent_id)
        bound_errors = agent_bound_errors(stored_sizes, rows)
        if bound_errors:
            raise invalid_request("the agent would hold more than an agent may", bound_errors)
    await capability_queries.insert_versions(conn, rows, now=now)
    for skill in new_skills:
        version_ref = capability_ref(tenant, agent_id, skill.skill.id, skill.skill.version)
        published_event = caller_event(
            caller,
            "version.published",
            tenant=tenant,
            ref=version_ref,
            scopes=sorted(set(skill.skill.scopes)),
            trace_id=trace_id,
            request_id=request_id,
        )
        if (skill.skill.id, skill.skill.version) in candidates:
            # Not announced: the feed's readers may not see a candidate. The change still moves the
            # sequence, so every cache (the owner's exact reads among them) is dropped.
            scope.audit(msgspec.structs.replace(published_event, reason="candidate"))
            scope.change(CANDIDATE_CHANGE, tenant, agent_id, version_ref)
        else:
            scope.audit(published_event)
            scope.change("version.published", tenant, agent_id, version_ref)
    if not created and (prepared.body is not None or prepared.body_hash is not None):
        await signature_queries.record_registration(
            conn, tenant, agent_id, prepared.body, prepared.publisher_kid, prepared.body_hash
        )
    published = [ref for ref in published if (ref.id, ref.version) not in candidates]
    return RegistrationResult(
        created=created or bool(published) or bool(candidates),
        published=published,
        unchanged=unchanged,
        candidates=list(candidates.values()),
    )
