"""The search engine alone (registry.search.engine), no database: it never proposes what a viewer
could not see, forgets what is replaced, tolerates one typing error, finds by meaning, treats any
text as words, and bounds its work by fixed depths whatever matches."""

from __future__ import annotations

import functools

from hypothesis import given, settings
from hypothesis import strategies as st

from registry.discovery.ranking import query_words
from registry.search.embeddings import Embedder
from registry.search.engine import MEANING_DEPTH, SCORE_SCALE, WORD_DEPTH, Document, Proposal, SearchIndex

TENANTS = ["acme", "globex", "initech"]


def doc(tenant: str, agent: str, skill: str, text: str, **fields) -> Document:
    fields.setdefault("name", skill)
    return Document(tenant=tenant, agent_id=agent, skill_id=skill, version="1.0.0", description=text, **fields)


@functools.cache
def embedder() -> Embedder:
    return Embedder()


def words_only(*documents: Document) -> SearchIndex:
    index = SearchIndex()
    index.replace((), list(documents))
    return index


def find(index: SearchIndex, q: str, viewer: str | None = None, **where) -> list[str]:
    return [h.skill_id for h in index.propose(query_words(q), Proposal(viewer=viewer, latest_only=False, **where))]


visibility = st.tuples(st.booleans(), st.lists(st.sampled_from(TENANTS), max_size=2, unique=True))


@given(
    st.lists(st.tuples(st.sampled_from(TENANTS), visibility), min_size=1, max_size=12),
    st.sampled_from([None, *TENANTS]),
)
@settings(max_examples=60, deadline=None)
def test_never_proposes_what_the_viewer_could_not_see(records, viewer):
    documents = [
        doc(tenant, f"a{i}", f"s{i}", "invoice lookup", public=public, shared_with=tuple(shared), latest=True)
        for i, (tenant, (public, shared)) in enumerate(records)
    ]
    index = words_only(*documents)
    proposed = {h.skill_id for h in index.propose(["invoice"], Proposal(viewer=viewer))}
    visible = {
        d.skill_id
        for d in documents
        if d.public or (viewer is not None and (d.tenant == viewer or viewer in d.shared_with))
    }
    assert proposed == visible


def test_replacing_an_agent_forgets_its_old_versions():
    index = words_only(doc("acme", "billing", "invoice.lookup", "find an invoice", public=True, latest=True))
    assert find(index, "invoice") == ["invoice.lookup"]
    index.replace(
        [("acme", "billing")], [doc("acme", "billing", "receipt.lookup", "find a receipt", public=True, latest=True)]
    )
    assert find(index, "invoice") == [] and find(index, "receipt") == ["receipt.lookup"]
    index.replace([("acme", "billing")], [])  # gone
    assert find(index, "receipt") == []


def test_latest_marker_and_filters_only_narrow():
    index = words_only(
        doc("acme", "a", "old", "invoice", public=True, latest=False),
        doc("acme", "a", "new", "invoice", public=True, latest=True, side_effect_rank=3, regions=("eu",)),
        doc("acme", "b", "any", "invoice", public=True, latest=True, tags=("finance",)),
    )
    assert set(h.skill_id for h in index.propose(["invoice"], Proposal(viewer=None))) == {"new", "any"}
    assert set(find(index, "invoice", side_effect_max=2)) == {"old", "any"}
    assert find(index, "invoice", tags=("finance",)) == ["any"]
    assert set(find(index, "invoice", region="us")) == {"old", "any"}  # no regions: every region
    assert find(index, "invoice", agent="b") == ["any"]


@given(
    st.sampled_from(["calendar", "invoice", "payment", "shipment"]),
    st.integers(0, 20),
    st.sampled_from("xyz"),
    st.integers(0, 3),
)
@settings(max_examples=80, deadline=None)
def test_one_typing_error_in_words_of_five_letters_or_more(word, at, letter, kind):
    index = words_only(doc("acme", "a", "target", f"the {word} service", public=True, latest=True))
    i = at % len(word)
    typo = [
        word[:i] + letter + word[i + 1 :],  # substitution
        word[:i] + letter + word[i:],  # insertion
        word[:i] + word[i + 1 :],  # deletion
        word[:i] + word[i + 1 : i + 2] + word[i] + word[i + 2 :],  # transposition
    ][kind]
    if len(typo) >= 5:
        assert find(index, typo) == ["target"], typo


def test_rare_words_outweigh_common_ones_and_length_does_not_win():
    filler = " ".join(f"word{i}" for i in range(400))
    index = words_only(
        *(doc("acme", f"a{i}", f"find.{i}", "find records", public=True) for i in range(20)),
        doc("acme", "mail", "email.send", "send an email", public=True),
        doc("acme", "long", "long.tool", f"find email {filler}", public=True),
    )
    assert find(index, "find email")[0] == "email.send"


def test_name_weighs_more_than_description():
    index = words_only(
        doc("acme", "a", "weather.forecast", "tells what tomorrow brings", public=True),
        doc("acme", "b", "calendar.book", "books a slot; weather permitting", public=True),
    )
    assert find(index, "weather")[0] == "weather.forecast"


HOSTILE = [
    "AND OR NOT",
    "*",
    "~",
    "a:b",
    '"quoted"',
    "title:invoice",
    "+invoice -refund",
    "日本語 发送消息",
    "!" * 512,
    "x" * 500,
]


def test_any_text_is_words():
    index = words_only(doc("acme", "a", "invoice.lookup", "find an invoice", public=True))
    for q in HOSTILE:
        index.propose(query_words(q), Proposal(viewer=None, latest_only=False))  # never raises
    assert find(index, "title:invoice") == ["invoice.lookup"]


def test_work_is_bounded_by_fixed_depths_whatever_matches():
    index = SearchIndex(embedder())
    index.replace(
        (), [doc("acme", f"a{i}", f"s{i}", f"send a message number {i}", public=True) for i in range(WORD_DEPTH + 300)]
    )
    hits = index.propose(["send", "message"], Proposal(viewer=None, latest_only=False))
    assert len(hits) <= WORD_DEPTH + MEANING_DEPTH
    assert all(0 <= h.score <= SCORE_SCALE for h in hits)
    assert [(-h.score, h.ref) for h in hits] == sorted((-h.score, h.ref) for h in hits)


def test_meaning_finds_records_that_share_no_word():
    index = SearchIndex(embedder())
    index.replace(
        (),
        [
            doc("acme", "slack", "chat.post", "Posts text into a Slack channel", name="Slack poster", public=True),
            doc("acme", "math", "calc.add", "Adds two integers", public=True),
            doc("acme", "weather", "forecast.get", "Tomorrow's temperature for a city", public=True),
        ],
    )
    assert find(index, "send a message to my team") == ["chat.post"]
    # words nobody knows have no meaning: nothing is proposed for them
    assert find(index, "zq3fa9b1c2") == []


def test_whether_an_invisible_record_holds_a_word_changes_nothing_a_caller_sees():
    """The one-typo corrections are tried whatever other tenants' private records hold (an outside
    review read "does a private record hold W" off whether its own near-miss record was found)."""
    index = words_only(doc("attacker", "probe", "probe.skill", "glimmerfux", public=True, latest=True))
    assert find(index, "glimmerfox", "attacker") == ["probe.skill"]
    index.replace((), [doc("victim", "secret", "secret.skill", "glimmerfox project", latest=True)])
    assert find(index, "glimmerfox", "attacker") == ["probe.skill"]


class SameMeaning:
    """Every text means the same thing: every record is a perfect meaning match."""

    dim = 4

    def known(self, word: str) -> bool:
        return word.isalpha()

    def embed(self, texts: list[str]):
        import numpy as np

        return np.tile(np.array([1, 0, 0, 0], dtype=np.float32), (len(texts), 1))


def test_meaning_proposes_shared_records_to_a_viewer_that_published_nothing():
    index = SearchIndex(SameMeaning())  # type: ignore[arg-type]
    index.replace((), [doc("owner", "a", "shared.skill", "posts to chat", shared_with=("reader",), latest=True)])
    assert find(index, "colleagues", "owner") == ["shared.skill"]
    assert find(index, "colleagues", "reader") == ["shared.skill"]
