"""The comparison of shown and printed outputs the documentation tests rely on (tests/docs_support.py)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from tests.docs_support import output_pattern, plain_comments, shown_outputs, unmatched_outputs

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet="ab .:/-", max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(alphabet="xyz", max_size=3), inner, max_size=3),
    max_leaves=10,
)


@given(json_values)
def test_an_answer_shown_spaced_matches_it_printed_compact(value):
    assert output_pattern(json.dumps(value)).search(json.dumps(value, separators=(",", ":")))


@given(json_values)
def test_a_changed_answer_does_not_match(value):
    printed = json.dumps({"v": value}, separators=(",", ":"))
    assert not output_pattern(json.dumps({"v": value, "extra": 1})).search(printed)


def test_dots_stand_for_anything_on_one_line_only():
    assert output_pattern('{"jti": "...", "depth": 1}').search('{"jti":"4f-9","depth":1}')
    assert not output_pattern("first ... last").search("first\nlast")
    assert not output_pattern("first ... last").search("first\nmiddle\nlast")
    assert output_pattern("first\nlast").search("first\nlast")


def test_shown_outputs_are_found_in_order():
    assert unmatched_outputs(["a", "b"], "a then b") == []
    assert unmatched_outputs(["b", "a"], "a then b") == ["a"]


def test_a_block_shows_its_outputs_with_continuations():
    block = 'run\n# -> {"a": 1,\n#    "b": 2}\n# a remark\n#    not a continuation\nrun again\n# -> done\n'
    assert shown_outputs(block) == ['{"a": 1,\n"b": 2}', "done"]
    assert plain_comments(block) == ["# a remark", "#    not a continuation"]
