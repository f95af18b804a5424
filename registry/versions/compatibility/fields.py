"""The skill-field rules of compatibility (docs/api.md#compatibility): scopes added, side effect
raised, approval newly required, data regions changed (`scope_added`, `side_effect_raised`,
`approval_required`, `data_regions_changed`). Pure: no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from registry.core.records import SIDE_EFFECT_ORDER, approval_required
from registry.versions.compatibility.breaking_change import BreakingChange


def field_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[BreakingChange]:
    """Every change of a skill field (not its schemas) from `old` to `new` that breaks callers of `old`."""
    return (
        _scope_changes(old, new)
        + _side_effect_changes(old, new)
        + _approval_changes(old, new)
        + _region_changes(old, new)
    )


def _strings(skill: Mapping[str, Any], key: str) -> list[str]:
    value = skill.get(key) or []
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _scope_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[BreakingChange]:
    old_scopes = set(_strings(old, "scopes"))
    added = dict.fromkeys(scope for scope in _strings(new, "scopes") if scope not in old_scopes)
    return [
        BreakingChange(
            "/scopes", "scope_added", f"scope {scope!r} is now required; callers holding the old scopes lack it"
        )
        for scope in added
    ]


def _side_effect_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[BreakingChange]:
    old_effect, new_effect = old.get("sideEffect"), new.get("sideEffect")
    if old_effect == new_effect:
        return []
    old_rank, new_rank = SIDE_EFFECT_ORDER.get(old_effect), SIDE_EFFECT_ORDER.get(new_effect)  # type: ignore[arg-type]
    if old_rank is None or new_rank is None:
        return [
            BreakingChange(
                "/sideEffect",
                "undecidable",
                f"sideEffect changed from {old_effect!r} to {new_effect!r}, which cannot be ranked",
            )
        ]
    if new_rank > old_rank:
        return [
            BreakingChange(
                "/sideEffect", "side_effect_raised", f"sideEffect raised from {old_effect!r} to {new_effect!r}"
            )
        ]
    return []


def _requires_approval(skill: Mapping[str, Any]) -> bool:
    return approval_required(skill.get("sideEffect"), skill.get("requiresApproval"))


def _approval_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[BreakingChange]:
    if _requires_approval(new) and not _requires_approval(old):
        return [
            BreakingChange("/requiresApproval", "approval_required", "calls now require approval; before they did not")
        ]
    return []


def _region_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[BreakingChange]:
    old_regions, new_regions = set(_strings(old, "dataRegions")), set(_strings(new, "dataRegions"))
    if old_regions == new_regions:
        return []
    parts = []
    if added := sorted(new_regions - old_regions):
        parts.append(f"added {added}")
    if removed := sorted(old_regions - new_regions):
        parts.append(f"removed {removed}")
    return [BreakingChange("/dataRegions", "data_regions_changed", "dataRegions changed: " + ", ".join(parts))]
