"""Typed rows: how a query's records become the Structs `db/` returns, in one place.

Every query function of `db/` answers Structs (msgspec, frozen), never asyncpg records read by string
key: a caller sees the row's fields and their types, and a renamed column fails where it is read,
not as a KeyError at run time. A row Struct's fields are its SELECT's columns, in order, so a record
becomes one by position (`Row(*record)`: no dict, no per-field lookup, the cost of a tuple); the
first record of every answer is checked against the field names, so a query and its Struct that
drift apart fail at once rather than shift values into the wrong fields.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import asyncpg
import msgspec

Row = TypeVar("Row", bound=msgspec.Struct)


class ColumnMismatch(TypeError):
    """A query's columns are not its row Struct's fields (a programming error: fix one of them)."""


def _check(cls: type[msgspec.Struct], record: asyncpg.Record) -> None:
    columns = tuple(record.keys())
    if columns != cls.__struct_fields__:
        raise ColumnMismatch(f"{cls.__name__} has fields {cls.__struct_fields__}, the query answered {columns}")


def typed_rows(cls: type[Row], records: Sequence[asyncpg.Record]) -> list[Row]:
    """`records` as `cls`, by position, the columns checked once per answer."""
    if not records:
        return []
    _check(cls, records[0])
    return [cls(*record) for record in records]


def typed_row(cls: type[Row], record: asyncpg.Record | None) -> Row | None:
    """`record` as `cls` (None stays None)."""
    if record is None:
        return None
    _check(cls, record)
    return cls(*record)
