"""Typed rows (db/rows.py): records become Structs by position, and a query whose columns drift
from its Struct's fields fails at once instead of shifting values into the wrong fields."""

from __future__ import annotations

import msgspec
import pytest

from db.rows import ColumnMismatch, typed_row, typed_rows


class Pair(msgspec.Struct, frozen=True, gc=False):
    name: str
    n: int


async def test_records_become_structs_by_position(db):
    rows = await db.fetch("SELECT 'a' AS name, 1 AS n UNION ALL SELECT 'b', 2 ORDER BY 2")
    assert typed_rows(Pair, rows) == [Pair("a", 1), Pair("b", 2)]
    assert typed_row(Pair, rows[1]) == Pair("b", 2)
    assert typed_rows(Pair, []) == [] and typed_row(Pair, None) is None


async def test_columns_that_drift_from_the_fields_fail_at_once(db):
    for sql in ("SELECT 1 AS n, 'a' AS name", "SELECT 'a' AS name", "SELECT 'a' AS name, 1 AS n, 2 AS extra"):
        record = await db.fetchrow(sql)
        with pytest.raises(ColumnMismatch, match="Pair has fields"):
            typed_row(Pair, record)
        with pytest.raises(ColumnMismatch):
            typed_rows(Pair, [record])
