"""registry.versions.compatibility.fields: the skill-field rows of the breaking-change table
(docs/api.md#compatibility), each through `check_compatibility` and through `field_changes` alone
(the input schemas are equal, so the fields' changes are all there is)."""

from __future__ import annotations

from typing import Any

import pytest

from registry.versions.compatibility.fields import field_changes
from registry.versions.compatibility.verdict import check_compatibility


def inp(schema: Any, **fields: Any) -> dict[str, Any]:
    return {"inputSchema": schema, "sideEffect": "none", **fields}


CASES = [
    # --- skill fields --------------------------------------------------------------------------
    pytest.param(inp({}, scopes=["a", "b"]), inp({}, scopes=["a"]), set(), id="scope-removed"),
    pytest.param(inp({}, scopes=["a"]), inp({}, scopes=["b", "a"]), {("scope_added", "/scopes")}, id="scope-added"),
    pytest.param(inp({}, sideEffect="write"), inp({}, sideEffect="idempotent"), set(), id="side-effect-lowered"),
    pytest.param(
        inp({}, sideEffect="none"),
        inp({}, sideEffect="write"),
        {("side_effect_raised", "/sideEffect")},
        id="side-effect-raised",
    ),
    pytest.param(
        inp({}, sideEffect="write"),
        inp({}, sideEffect="destructive"),
        {("side_effect_raised", "/sideEffect"), ("approval_required", "/requiresApproval")},
        id="destructive-implies-approval",
    ),
    pytest.param(
        inp({}, sideEffect="destructive", requiresApproval=True),
        inp({}, sideEffect="destructive", requiresApproval=False),
        set(),
        id="approval-dropped",
    ),
    pytest.param(
        inp({}, requiresApproval=False),
        inp({}, requiresApproval=True),
        {("approval_required", "/requiresApproval")},
        id="approval-on",
    ),
    pytest.param(
        inp({}, dataRegions=["eu", "us"]), inp({}, dataRegions=["us", "eu"]), set(), id="data-regions-reordered"
    ),
    pytest.param(
        inp({}, dataRegions=["eu"]),
        inp({}, dataRegions=["eu", "us"]),
        {("data_regions_changed", "/dataRegions")},
        id="data-regions-added",
    ),
    pytest.param(
        inp({}, dataRegions=["eu"]), inp({}), {("data_regions_changed", "/dataRegions")}, id="data-regions-removed"
    ),
]


@pytest.mark.parametrize(("old", "new", "expected"), CASES)
def test_skill_field_rows(old: dict, new: dict, expected: set[tuple[str, str]]) -> None:
    assert {(c.kind, c.path) for c in check_compatibility(old, new)} == expected
    changes = field_changes(old, new)
    assert {(c.kind, c.path) for c in changes} == expected
    assert all(c.message.strip() for c in changes)


def test_rows_cover_every_field_kind() -> None:
    kinds = {kind for case in CASES for kind, _ in case.values[2]}
    assert kinds == {"scope_added", "side_effect_raised", "approval_required", "data_regions_changed"}
