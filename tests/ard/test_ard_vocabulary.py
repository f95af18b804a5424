"""ARD's filter vocabulary, defined once (issue 36): one list of fields for `query.filter` and
explore's facets (db.ard.FACET_FIELDS), and the values of its side-effect and health filters the
same vocabularies discovery, offers and MCP accept (registry.core.records.SIDE_EFFECT_NAMES, Health)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, get_args

import pytest

from db.ard import FACET_FIELDS, _facet_groups
from registry.ard import service as ard
from registry.core.problems import ProblemError
from registry.core.records import SIDE_EFFECT_NAMES, SIDE_EFFECT_ORDER, Health, SideEffect
from registry.discovery.service import side_effect_rank
from registry.mcp.tool_arguments import SideEffectMax

ROOT = Path(__file__).parent.parent.parent
NO_PUBLISHERS: Any = None  # no filter here names a publisher


def test_filters_and_facets_share_one_field_list():
    assert ard.SEARCH_FILTER_KEYS is FACET_FIELDS
    for field in FACET_FIELDS:
        assert _facet_groups(field, "p", "s")  # every field has its groups
    with pytest.raises(ProblemError):
        ard.search_filter({"metadata.capreg.status": "active"}, NO_PUBLISHERS)


def test_side_effect_values_are_discoverys():
    assert SIDE_EFFECT_NAMES == get_args(SideEffect) == get_args(get_args(SideEffectMax)[0])
    assert list(SIDE_EFFECT_ORDER) == list(SIDE_EFFECT_NAMES)
    for name in SIDE_EFFECT_NAMES:
        where = ard.search_filter({"metadata.capreg.sideEffectMax": name}, NO_PUBLISHERS)
        assert where.side_effect_max == side_effect_rank(name) == SIDE_EFFECT_ORDER[name]
    for wrong in ("risky", "None", ""):
        with pytest.raises(ProblemError):
            ard.search_filter({"metadata.capreg.sideEffectMax": wrong}, NO_PUBLISHERS)
        with pytest.raises(ProblemError):
            side_effect_rank(wrong)


def test_health_values_are_the_health_rules():
    for value in get_args(Health):
        assert ard.search_filter({"metadata.capreg.health": value}, NO_PUBLISHERS).health == (value,)
    with pytest.raises(ProblemError):
        ard.search_filter({"metadata.capreg.health": "alive"}, NO_PUBLISHERS)


def test_the_side_effect_names_are_written_once():
    spelt = re.compile(r"""["']none["'],\s*["']idempotent["']""")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for top in ("db", "registry", "auth")
        for path in sorted((ROOT / top).rglob("*.py"))
        if not path.is_relative_to(ROOT / "registry" / "cli") and not path.is_relative_to(ROOT / "registry" / "client")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if spelt.search(line)
    ]
    assert found == ["registry/core/records.py:14"], found
