"""bench/livemcpbench.py's scoring: the metrics as pure functions (exact examples and properties), and,
where the data set is present (../shared/datasets/livemcpbench), its gold mapping and registration
bodies. The bench itself (a server, the baselines) is not run here."""

from __future__ import annotations

import math

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import livemcpbench as lmb
from registry.core.records import AgentRegistration

G = frozenset


def test_recall_counts_each_gold_tool_once_over_all_gold():
    gold = [G({"a/x"}), G({"b/y", "c/y"}), G({"d/z"})]
    assert lmb.recall_at(["a/x", "c/y", "q/q", "b/y", "r/r", "d/z"], gold, 5) == pytest.approx(2 / 3)
    assert lmb.recall_at(["q/q"], gold, 5) == 0.0
    assert lmb.recall_at(["a/x"], [], 5) == 0.0
    # Six gold tools: five results can find at most 5/6 of them.
    six = [G({f"a/{i}"}) for i in range(6)]
    assert lmb.recall_at([f"a/{i}" for i in range(6)], six, 5) == pytest.approx(5 / 6)


def test_reciprocal_rank_is_the_first_gold_within_k():
    gold = [G({"a/x"}), G({"b/y"})]
    assert lmb.reciprocal_rank(["q", "b/y", "a/x"], gold, 10) == 0.5
    assert lmb.reciprocal_rank(["q"] * 10 + ["a/x"], gold, 10) == 0.0
    assert lmb.reciprocal_rank([], gold, 10) == 0.0


def test_ndcg_binary_gain_and_ideal_of_min_gold_k():
    gold = [G({"a/x"}), G({"b/y", "c/y"})]
    assert lmb.ndcg_at(["a/x", "b/y"], gold, 10) == pytest.approx(1.0)
    # The second holder of the same gold tool gains nothing.
    assert lmb.ndcg_at(["b/y", "c/y", "a/x"], gold, 10) == pytest.approx(
        (1 + 1 / math.log2(4)) / (1 + 1 / math.log2(3))
    )
    assert lmb.ndcg_at(["q", "a/x"], [G({"a/x"})], 10) == pytest.approx(1 / math.log2(3))


def test_servers_distinct_and_rrf():
    assert lmb.distinct_servers(["a/1", "a/2", "b/1", "a/3", "c/1"]) == ["a/1", "b/1", "c/1"]
    # b is second in one list and first in the other: it wins; a and c tie and fall to key order.
    assert lmb.rrf([["a", "b"], ["b", "c"]]) == ["b", "a", "c"]


def test_identifiers_questions_and_gold_lists():
    taken: set[str] = set()
    assert lmb.sanitize_id("npmSearch", "t-", 128, taken) == "npm_search"
    assert lmb.sanitize_id("npm_search", "t-", 128, taken) == "npm_search-2"
    assert lmb.sanitize_id("12306 MCP", "s-", 64, taken) == "s-12306-mcp"
    assert lmb.sanitize_id("get-weread-rank", "t-", 128, set()) == "get-weread-rank"
    assert lmb.gold_names_of("1. load\n2. beat_track\n\n3) load\n") == ["load", "beat_track"]
    assert lmb.query_text("a  b\nc") == "a b c"
    assert lmb.query_text("word " * 200) == ("word " * 102).strip()


ids = st.text("abcdef", min_size=1, max_size=2).map(lambda s: f"{s[0]}/{s}")


@given(ranked=st.lists(ids, max_size=15, unique=True), gold=st.lists(st.frozensets(ids, min_size=1), max_size=6))
def test_metrics_are_fractions_and_perfect_when_gold_leads(ranked, gold):
    for value in (lmb.recall_at(ranked, gold), lmb.reciprocal_rank(ranked, gold), lmb.ndcg_at(ranked, gold)):
        assert 0.0 <= value <= 1.0 + 1e-9
    disjoint = [g for g in gold if not any(g & other for other in gold if other is not g)]
    if disjoint and len(disjoint) <= lmb.K_RECALL:
        leading = [min(g) for g in disjoint]
        assert lmb.recall_at(leading, disjoint) == 1.0
        assert lmb.reciprocal_rank(leading, disjoint) == 1.0
        assert lmb.ndcg_at(leading, disjoint) == pytest.approx(1.0)


needs_dataset = pytest.mark.skipif(
    not (lmb.DEFAULT_DATASET / "tools.json").is_file(), reason=f"LiveMCPBench not at {lmb.DEFAULT_DATASET}"
)


@needs_dataset
def test_gold_mapping_and_registration_bodies():
    data = lmb.load(lmb.DEFAULT_DATASET)
    m = data.mapping
    assert (m["servers"], m["tools"], m["tasks"]) == (70, 527, 95)
    assert m["gold_mapped_exactly"] + len(m["gold_mapped_by_alias"]) + len(m["gold_unmapped"]) == m["gold_tools"]
    assert len(m["gold_unmapped"]) <= 1 and m["tasks_scored"] == 95
    keys = [t.key for t in data.tools]
    assert len(set(keys)) == len(keys)
    for server in data.servers:
        for attempt in range(len(lmb.ATTEMPTS)):
            msgspec.json.decode(msgspec.json.encode(lmb.agent_body(server, attempt)), type=AgentRegistration)
