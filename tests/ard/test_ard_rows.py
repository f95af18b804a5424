"""The typed rows of ARD's and the search engine's queries (db.ard, db.ranked_search.latest_hits,
db.search_index) against real PostgreSQL: each answers its row Struct (columns checked against the
fields by db.rows), and every value has the type its field declares: the Struct's values re-validated
strictly by msgspec equal it, for every row shape (a facet's buckets and its "other" row included)."""

from __future__ import annotations

import msgspec
import pytest

from db import ard, ranked_search, search_index
from registry.search.engine import Hit
from tests.ard.test_ard import agent, register, skill

pytestmark = pytest.mark.asyncio(loop_scope="session")

SIDE_EFFECT_NAMES = ["none", "idempotent", "write", "destructive"]


def assert_typed(rows: list, cls: type[msgspec.Struct]) -> None:
    assert rows, f"no {cls.__name__} to check"
    for row in rows:
        assert type(row) is cls
        assert msgspec.convert(msgspec.structs.asdict(row), cls, strict=True) == row


async def test_ard_and_search_index_queries_answer_typed_rows(client, mint, tenant, db):
    for name, tags in (("alpha", ("red", "blue")), ("beta", ("red",)), ("gamma", ("green",))):
        skills = [skill("work.do", tags=tags, regions=["eu"], examples=["do work", "more work"])]
        await register(client, mint, tenant, name, agent(name, skills))
    where = ard.EntryFilter(tenants=(tenant,))
    async with db.acquire() as conn:
        ranked = await ard.ranked_page(conn, viewer_tenant=None, where=where, text=None, after=None, limit=10)
        assert_typed(ranked, ard.RankedEntryRow)
        assert {r.agent_id for r in ranked} == {"alpha", "beta", "gamma"}

        listed = await ard.identifier_page(conn, viewer_tenant=None, where=where, configured={}, after=None, limit=10)
        assert_typed(listed, ard.IdentifierEntryRow)
        tagged = await ard.identifier_page(
            conn,
            viewer_tenant=None,
            where=ard.EntryFilter(tenants=(tenant,), tags=("red",)),
            configured={},
            after=None,
            limit=10,
        )
        assert_typed(tagged, ard.IdentifierEntryRow)
        assert [r.agent_id for r in tagged] == ["alpha", "beta"]

        entries = await ard.entry_rows(conn, [(r.tenant, r.agent_id) for r in listed])
        assert_typed(entries, ard.EntryRow)
        assert all(e.lease_until is None and e.skills[0]["id"] == "work.do" for e in entries)

        facets = await ard.facet_counts(
            conn,
            viewer_tenant=None,
            where=where,
            text=None,
            facets=[ard.FacetRequest("tags", 1, 1), ard.FacetRequest("metadata.capreg.sideEffectMax", 5, 1)],
            configured={},
            side_effect_names=SIDE_EFFECT_NAMES,
        )
        assert_typed(facets, ard.FacetCountRow)
        other = [r for r in facets if r.other]
        assert [(r.field, r.value, r.n, r.rn) for r in other] == [
            ("tags", None, 2, None)
        ]  # blue and green: beyond the limit of 1

        hits = [Hit(e.tenant, e.agent_id, "work.do", "1.0.0", 7) for e in entries]
        latest = await ranked_search.latest_hits(conn, hits)
        assert_typed(latest, ranked_search.LatestHitRow)

        documents = await search_index.agent_documents(conn, [(tenant, "alpha")])
        assert_typed(documents, search_index.DocumentRow)
        assert documents[0].examples == ["do work", "more work"]

        changes = await search_index.changed_agents(conn, 0, limit=5)
        assert_typed(changes, search_index.ChangedAgentRow)

        batches: list[list[search_index.DocumentRow]] = []
        await search_index.snapshot(conn, batches.append, batch=50)
        assert_typed([row for batch in batches for row in batch], search_index.DocumentRow)
