"""Preparing a registration, pure: parse, normalize, validate (schemas compiled), hash, and compare
new versions with published ones. No I/O: the schema worker processes (registry.core.bounded_work)
run these, and import this module and what it imports only (no web framework, no database driver,
so each worker stays small: docs/performance.md). registry.agents.registration runs them there
and writes the outcome.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from registry.agents.card_signing import CardNotCanonical, canonical_card
from registry.agents.cards import a2a_card_dict, normalize_registration
from registry.core.problems import ErrorItem, ProblemError, invalid_request
from registry.core.records import AgentRegistration, SkillRegistration
from registry.versions.compatibility.verdict import publish_verdict
from registry.versions.contracts import parse_version, schema_errors, skill_content
from registry.versions.fixtures import fixture_errors
from registry.versions.semver import Version

_encoder = msgspec.json.Encoder(order="sorted")


class PreparedSkill(msgspec.Struct):
    skill: SkillRegistration
    version: Version
    requires_approval: bool
    content_hash: str

    @property
    def identity(self) -> tuple[str, str]:
        """(skill id, precedence): what tells this version apart from its skill's others
        (registry.versions.semver, one version per precedence); db.capabilities.content_hashes' key."""
        return (self.skill.id, self.version.sort_key())


class CompatibilityVerdict(msgspec.Struct):
    """`incompatibilities(existing, new)` computed before the write, with the inputs it was computed on."""

    existing: list
    new: list
    breaking: list[ErrorItem]


class PreparedRegistration(msgspec.Struct):
    registration: AgentRegistration
    card: dict
    card_hash: str
    skills: list[PreparedSkill]
    verdict: CompatibilityVerdict | None = None
    # registration_digest of the body's bytes: stored with the agent for the unchanged fast path.
    body_hash: str | None = None
    # The body as received, kept with the agent (GET .../registration), and the kid of its verified
    # publisher signature (None: unsigned; registry.agents.publisher_keys.verified_publisher).
    body: bytes | None = None
    publisher_kid: str | None = None


def _hash(value: Any) -> str:
    return hashlib.sha256(_encoder.encode(value)).hexdigest()


def prepare_registration_outcome(registration: AgentRegistration) -> PreparedRegistration | tuple[str, list[ErrorItem]]:
    """`prepare_registration_now`, its refusal returned rather than raised (to cross a process boundary)."""
    try:
        return prepare_registration_now(registration)
    except ProblemError as error:
        return error.detail, list(error.errors or [])


def prepare_registration_now(registration: AgentRegistration) -> PreparedRegistration:
    """Parse, normalize, validate (schemas compiled) and hash a registration; ProblemError if invalid."""
    registration = normalize_registration(registration)
    errors: list[ErrorItem] = []
    if not registration.skills:
        errors.append(ErrorItem(path="/skills", message="an agent registers at least one skill"))
    seen: set[tuple[str, str]] = set()
    prepared: list[PreparedSkill] = []
    for index, skill in enumerate(registration.skills):
        base = f"/skills/{index}"
        version = parse_version(skill.version, f"{base}/version")
        if isinstance(version, ErrorItem):
            errors.append(version)
            continue
        key = (skill.id, version.sort_key())  # one version per precedence: 1.0.0 and 1.0.0+b are the same
        if key in seen:
            errors.append(
                ErrorItem(path=base, message=f"{skill.id}@{skill.version} appears twice (build metadata aside)")
            )
        seen.add(key)
        schema_problems = schema_errors(skill.input_schema, f"{base}/inputSchema", must_be_object=True)
        schema_problems += schema_errors(skill.output_schema, f"{base}/outputSchema", must_be_object=False)
        errors += schema_problems
        errors += fixture_errors(skill, base, schemas_valid=not schema_problems)
        content = skill_content(skill)
        prepared.append(PreparedSkill(skill, version, content["requiresApproval"], _hash(content)))
    if errors:
        raise invalid_request("the registration is invalid", errors)
    card = a2a_card_dict(registration)
    try:  # every card served from it is signed: it must have A2A's canonical form (registry.agents.card_signing)
        canonical_card({key: value for key, value in card.items() if key != "signatures"})
    except CardNotCanonical as exc:
        raise invalid_request(
            "the card is not an A2A AgentCard with an RFC 8785 canonical form, so it cannot be signed",
            [ErrorItem(path="", message=str(exc))],
        ) from None
    return PreparedRegistration(registration, card, _hash(card), prepared)


def incompatibilities(
    existing: list[tuple[str, Version, dict]], new: list[tuple[int, str, Version, dict]]
) -> list[ErrorItem]:
    """Breaking changes that new versions would publish without a major bump, by `publish_verdict`.

    `existing`: (skill id, version, contract) of stored, non-retired versions; `new`: (index in the
    body, skill id, version, contract). Versions published earlier in the same request count as
    published for the ones after them.
    """
    known = list(existing)
    errors: list[ErrorItem] = []
    for index, skill_id, version, contract in sorted(new, key=lambda item: (item[1], item[2])):
        line = [(v, c) for s, v, c in known if s == skill_id]
        for neighbour, above, change in publish_verdict(version, contract, line):
            if above:
                message = f"{skill_id}@{neighbour} is already published and would break callers of {version}: {change.message}"
            else:
                message = f"{change.message} (compared with {skill_id}@{neighbour}; breaking changes need a new major version)"
            errors.append(ErrorItem(path=f"/skills/{index}{change.path}", kind=change.kind, message=message))
        known.append((skill_id, version, contract))
    return errors
