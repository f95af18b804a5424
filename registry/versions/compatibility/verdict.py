"""The compatibility verdicts (docs/api.md#compatibility): `check_compatibility(old, new)`, every
breaking change from one skill to another (schemas and fields), and `publish_verdict`, the one
verdict on publishing a version next to the releases of its skill, which `PUT /v1/agents/...` and
`POST /v1/compatibility` both ask. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple, TypeVar

from registry.versions.compatibility.breaking_change import BreakingChange
from registry.versions.compatibility.fields import field_changes
from registry.versions.compatibility.schemas import schema_changes
from registry.versions.semver import Version

T = TypeVar("T")


def check_compatibility(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[BreakingChange]:
    """Every change from `old` to `new` (skills in the registration's camelCase shape) that breaks
    callers of `old`; empty when compatible."""
    changes: list[BreakingChange] = []
    changes += schema_changes(
        "input", _schema_of(old, "inputSchema", {"type": "object"}), _schema_of(new, "inputSchema", {"type": "object"})
    )
    changes += schema_changes("output", _schema_of(old, "outputSchema", {}), _schema_of(new, "outputSchema", {}))
    changes += field_changes(old, new)
    return changes


def _schema_of(skill: Mapping[str, Any], key: str, default: Any) -> Any:
    value = skill.get(key)
    return default if value is None else value


class PublishBreak(NamedTuple):
    """A breaking change publishing a version would make, against `neighbour`: the release below
    (`above` False: the new one accepts or promises less than it) or the release above, already
    published (`above` True: it would break callers of the new one)."""

    neighbour: Version
    above: bool
    change: BreakingChange


def baseline(new: Version, line: Iterable[tuple[Version, T]]) -> tuple[Version, T] | None:
    """The release `new` is compared with (docs/api.md#compatibility), from `line` (other releases of
    the same skill, each with what the caller keeps of it): the highest lower release of its major
    line. A pre-release has none: pre-releases promise nothing, and none is a baseline."""
    if new.is_prerelease:
        return None
    same_line = [(v, c) for v, c in line if v.major == new.major and not v.is_prerelease and v < new]
    return max(same_line, default=None, key=lambda vc: vc[0])


def publish_verdict(
    new: Version, contract: Mapping[str, Any], line: Iterable[tuple[Version, Mapping[str, Any]]]
) -> list[PublishBreak]:
    """The one verdict on publishing `new` next to `line` (other releases of the same skill): empty
    when publishing is accepted. `PUT /v1/agents/...` and `POST /v1/compatibility` both ask this.

    `new` is compared with the highest lower release of its major line, and the next higher release
    already published must stay compatible with it. A new major version is always accepted, and
    pre-releases promise nothing: they are neither checked nor used as a baseline (docs/api.md).
    """
    if new.is_prerelease:
        return []
    line = list(line)
    lower = baseline(new, line)
    higher = min(
        ((v, c) for v, c in line if v.major == new.major and not v.is_prerelease and v > new),
        default=None,
        key=lambda vc: vc[0],
    )
    breaks: list[PublishBreak] = []
    if lower is not None:
        breaks += [PublishBreak(lower[0], False, change) for change in check_compatibility(lower[1], contract)]
    if higher is not None:
        breaks += [PublishBreak(higher[0], True, change) for change in check_compatibility(contract, higher[1])]
    return breaks


def out_of_order(old: Version, new: Version) -> str | None:
    """Why `new` cannot be compared as the version after `old` (`POST /v1/compatibility`), else None."""
    return f"{new} is not above {old}" if new <= old else None


def compatibility_report(
    old: Version, new: Version, old_contract: dict, new_contract: dict
) -> tuple[list[BreakingChange], list[BreakingChange]]:
    """For `POST /v1/compatibility`, in one worker call: every breaking change from `old_contract` to
    `new_contract`, and those that would refuse publishing `new` after `old` (`publish_verdict`)."""
    found = check_compatibility(old_contract, new_contract)
    refusing = [change for _, _, change in publish_verdict(new, new_contract, [(old, old_contract)])]
    return found, refusing
