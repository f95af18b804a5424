"""The data-region rule, defined once (issue 36): auth.policy.serves_regions, rendered as SQL by
db.capabilities.serves_regions_sql. PostgreSQL and Python decide every combination alike; release
(the token's `regions`), offers and discovery's `region` and ARD's dataRegions filter all read it,
and no second copy of it is written in registry/ or db/."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from auth.policy import DATA_LOCATION_DENIED, CapabilityGate, decide_release, serves_regions
from auth.principal import Caller
from db.capabilities import serves_regions_sql

ROOT = Path(__file__).parent.parent.parent
REGIONS = ("eu", "us", "ap")
SUBSETS = [list(s) for n in range(len(REGIONS) + 1) for s in itertools.combinations(REGIONS, n)]


async def test_sql_and_python_serve_alike(db):
    async with db.acquire() as conn:
        statement = await conn.prepare(
            f"SELECT {serves_regions_sql('$1::text[]', 'coalesce($2::text[], ARRAY[]::text[])')}"
        )
        for data_regions in SUBSETS:
            for regions in (None, *SUBSETS):
                assert await statement.fetchval(data_regions, regions) is serves_regions(data_regions, regions), (
                    data_regions,
                    regions,
                )


def test_release_denies_exactly_what_the_rule_does_not_serve():
    for data_regions in SUBSETS:
        gate = CapabilityGate(
            tenant="t", visibility="public", shared_with=(), status="active", data_regions=tuple(data_regions)
        )
        for regions in (None, *(tuple(s) for s in SUBSETS)):
            caller = Caller(tenant="t", sub="s", scopes=frozenset(), regions=regions)
            denied = decide_release(caller, gate, exact_version=False) == DATA_LOCATION_DENIED
            assert denied is not serves_regions(data_regions, regions)


# The rule's shapes: an empty-array test of data_regions (SQL), membership of one region in them (Python).
_COPY = re.compile(r"cardinality\(\s*[\w.]*data_regions|region\s+(not\s+)?in\s+[\w.]*data_regions|data_regions\)?\s*&")


def test_the_region_rule_is_written_once():
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for top in ("db", "registry", "auth")
        for path in sorted((ROOT / top).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if _COPY.search(line)
    ]
    assert found == [], found
