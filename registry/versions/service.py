"""Comparing two versions of a skill (`POST /v1/compatibility`, docs/api.md#compatibility): both must be
comparable skills (registry.versions.contracts), `new` above `old`, and the answer is the verdict
publishing `new` after `old` would get (registry.versions.compatibility.verdict.publish_verdict, the
one definition), not a second opinion. Schemas are compiled and compared off the event loop, within
a deadline (registry.core.bounded_checks)."""

from __future__ import annotations

import msgspec

from registry.core.bounded_checks import bounded
from registry.core.problems import ErrorItem, invalid_request
from registry.core.records import SkillRegistration
from registry.versions.compatibility.breaking_change import BreakingChange
from registry.versions.compatibility.verdict import compatibility_report, out_of_order
from registry.versions.contracts import checked_schemas, parse_version, skill_content
from registry.versions.semver import Version


class SkillComparison(msgspec.Struct, frozen=True):
    """`found`: every breaking change from old to new; `refusing`: those that would refuse publishing
    new after old (none: compatible)."""

    found: list[BreakingChange]
    refusing: list[BreakingChange]


async def compare_skills(old: SkillRegistration, new: SkillRegistration) -> SkillComparison:
    """The verdict on publishing `new` after `old`; 400 `invalid_request` when they cannot be compared."""
    problems: list[ErrorItem] = []
    versions: dict[str, Version] = {}
    for side, skill in (("old", old), ("new", new)):
        parsed = parse_version(skill.version, f"/{side}/version")
        if isinstance(parsed, Version):
            versions[side] = parsed
        else:
            problems.append(parsed)
    problems += await bounded(
        checked_schemas,
        [
            (schema, f"/{side}/{key}", key == "inputSchema")
            for side, skill in (("old", old), ("new", new))
            for key, schema in (("inputSchema", skill.input_schema), ("outputSchema", skill.output_schema))
        ],
        what="checking the schemas",
    )
    if problems:
        raise invalid_request("both skills must be valid registrations", problems)
    old_version, new_version = versions["old"], versions["new"]
    if (why := out_of_order(old_version, new_version)) is not None:
        raise invalid_request("new must be a higher version than old", [ErrorItem(path="/new/version", message=why)])
    found, refusing = await bounded(
        compatibility_report,
        old_version,
        new_version,
        skill_content(old),
        skill_content(new),
        what="comparing the skills",
    )
    return SkillComparison(found, refusing)
