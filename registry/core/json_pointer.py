"""JSON pointers (RFC 6901): the one escaping of reference tokens, used wherever capreg names a
place in a body or a schema (`errors[].path`, compatibility findings, schema refusals)."""

from __future__ import annotations


def escape_token(token: str) -> str:
    """A reference token as it stands in a pointer: `~` is `~0`, `/` is `~1`."""
    return token.replace("~", "~0").replace("/", "~1")


def unescape_token(token: str) -> str:
    """The key a pointer's reference token names (`~1` before `~0`, as RFC 6901 orders it)."""
    return token.replace("~1", "/").replace("~0", "~")
