"""The one INSERT builder (db/inserts.py): bound parameters only, plain identifiers only."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from db.inserts import insert_statement

IDENTIFIER = st.from_regex(r"[a-z_][a-z0-9_]{0,20}", fullmatch=True)


@given(st.lists(IDENTIFIER, min_size=1, max_size=12, unique=True))
def test_every_value_is_a_bound_parameter_in_column_order(columns):
    statement = insert_statement("tickets", columns)
    n = len(columns)
    assert statement == (
        f"INSERT INTO tickets ({', '.join(columns)}) VALUES ({', '.join(f'${i}' for i in range(1, n + 1))})"
    )
    assert insert_statement("tickets", {c: None for c in columns}) == statement  # a row dict's keys


@pytest.mark.parametrize("name", ["tickets; DROP TABLE x", "a b", "Tickets", "x)", "", '"q"', "1a"])
def test_a_name_that_is_not_a_plain_identifier_is_refused(name):
    with pytest.raises(ValueError):
        insert_statement(name, ["jti"])
    with pytest.raises(ValueError):
        insert_statement("tickets", ["jti", name])
