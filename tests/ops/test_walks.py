"""The walks of three requests (bench/walks.py, docs/architecture.md#three-walks-measured), traced through a
real app on its own database: the refusal path is entered only by a refusal, once, and no request
climbs back into a lower layer (auth, db, registry.core) or the operation boundary."""

from __future__ import annotations

from bench.walks import walks


async def test_only_a_refusal_enters_the_refusal_path_and_no_layer_is_climbed(fresh_database, tmp_path):
    found = await walks(fresh_database, tmp_path)
    assert set(found) == {"registration", "offers", "ticket_mint", "ticket_mint_refused"}
    assert [found[name]["refusal_entries"] for name in ("registration", "offers", "ticket_mint")] == [0, 0, 0]
    assert found["ticket_mint_refused"]["refusal_entries"] == 1
    for name, walk in found.items():
        assert walk["modules"] > 10, (name, walk)  # the tracer saw the request's path at all
        climbed = [m for m in walk["re_entered"] if m.split(".")[0] in ("auth", "db") or m.startswith("registry.core.")]
        assert not climbed and "registry.operations.boundary" not in walk["re_entered"], (name, walk["re_entered"])
