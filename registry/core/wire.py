"""Wire base type: every JSON body capreg reads or writes is a camelCase msgspec Struct."""

from __future__ import annotations

import msgspec


class Wire(msgspec.Struct, rename="camel", kw_only=True):
    """Base for wire types: Python snake_case attributes, camelCase JSON keys."""
