"""A capability's searchable words, defined once (issue 36): its id (as words), name, tags and
description. The search engine indexes them (registry.search.engine: the `all` and `name` fields and
the meaning vector's text) and registration stores them as `capability_versions.search_text`
(registry.agents.registration); ranked search, discovery's `q`, offers' `need`, MCP and ARD's text
all ask the engine, so every door searches the same words. Pure."""

from __future__ import annotations

import re
from collections.abc import Sequence

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def words_of_id(identifier: str) -> str:
    """`sendMessage`, `send_message` and `send-message` all say "send message"."""
    return re.sub(r"[^\w]|_", " ", _CAMEL.sub(" ", identifier))


def capability_words(skill_id: str, name: str, tags: Sequence[str], description: str) -> tuple[str, str, str]:
    """The capability's searchable text in three parts: its head (the id as words, then the name),
    its tags, its description."""
    return f"{words_of_id(skill_id)} {name}", " ".join(tags), description
