"""A capability's searchable words, defined once (registry.core.search_words, issue 36): the engine
finds a capability by each of them, the meaning vector's text and the stored search_text are the
same words, and neither builds them another way."""

from __future__ import annotations

from types import SimpleNamespace

from registry.agents.registration import _search_text
from registry.core.search_words import capability_words
from registry.discovery.ranking import query_words
from registry.search.engine import Document, Proposal, SearchIndex

SKILL = SimpleNamespace(
    id="sendMessage_now", name="Zephyr courier", tags=["quokka", "dataExport"], description="marmot"
)


def test_every_searchable_word_finds_the_capability():
    index = SearchIndex()
    document = Document(
        tenant="acme",
        agent_id="a",
        skill_id=SKILL.id,
        version="1.0.0",
        name=SKILL.name,
        tags=tuple(SKILL.tags),
        description=SKILL.description,
        public=True,
        latest=True,
    )
    index.replace((), [document])
    words = query_words(" ".join(capability_words(SKILL.id, SKILL.name, SKILL.tags, SKILL.description)))
    assert {"send", "message", "now", "zephyr", "courier", "quokka", "marmot"} <= set(words)
    for word in words:
        assert [h.skill_id for h in index.propose([word], Proposal(viewer=None))] == [SKILL.id], word


def test_the_stored_text_is_the_engines():
    document = Document(
        tenant="acme",
        agent_id="a",
        skill_id=SKILL.id,
        version="1.0.0",
        name=SKILL.name,
        tags=tuple(SKILL.tags),
        description=SKILL.description,
    )
    assert _search_text(SKILL) == document.meaning_text.lower()
    assert query_words(_search_text(SKILL)) == query_words(document.meaning_text)


def test_the_words_are_built_in_one_place():
    from pathlib import Path

    root = Path(__file__).parent.parent.parent
    found = [
        str(path.relative_to(root))
        for top in ("registry", "db")
        for path in (root / top).rglob("*.py")
        if "(?<=[a-z0-9])(?=[A-Z])" in path.read_text()
        or "def words_of_id" in path.read_text()
        or "def _words_of_id" in path.read_text()
    ]
    assert found == ["registry/core/search_words.py"], found
