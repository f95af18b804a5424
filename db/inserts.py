"""The one INSERT builder: a row of named columns into a table, as bound parameters. Table and
column names come from code (a Struct's fields, a row dict built by a service), never from a caller;
they are checked as plain identifiers all the same, so no name can carry SQL."""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")


@lru_cache(maxsize=256)
def _statement(table: str, columns: tuple[str, ...]) -> str:
    for name in (table, *columns):
        if not _IDENTIFIER.fullmatch(name):
            raise ValueError(f"not a plain SQL identifier: {name!r}")
    placeholders = ", ".join(f"${n}" for n in range(1, len(columns) + 1))
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({placeholders})"


def insert_statement(table: str, columns: Iterable[str]) -> str:
    """`INSERT INTO table (columns...) VALUES ($1, ...)`, for `execute(statement, *values)` or
    `executemany(statement, rows)`; built once per table and column list."""
    return _statement(table, tuple(columns))
