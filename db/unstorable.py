"""Text PostgreSQL cannot store: NUL (no `text` or `jsonb` value may hold it) and lone UTF-16
surrogates (not encodable as UTF-8); and escaping them where a value must still be kept (an audit
event describing a refused request). Pure functions, no I/O.
"""

from __future__ import annotations

import re

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def unstorable(text: str) -> bool:
    return _UNSTORABLE.search(text) is not None


def escaped(text: str) -> str:
    """`text` with each unstorable character written as its JSON escape (`\\u0000`), so that it can
    be stored and still says what was sent."""
    if _UNSTORABLE.search(text) is None:
        return text
    return _UNSTORABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
