"""Tolerant extraction of tool-call arguments from text, and strict or lenient validation."""

from __future__ import annotations

import json
import time

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from registry.core.schema_guard import cached_validator
from registry.release.arguments import (
    MAX_DEPTH,
    ArgumentsUnparseable,
    ValidationReport,
    extract_json_object,
    validate_arguments,
)

SCHEMA = {
    "type": "object",
    "properties": {
        "invoiceId": {"type": "string", "pattern": "^inv-[0-9]{4}-[0-9]{3}$"},
        "includeLines": {"type": "boolean", "default": False},
        "page": {
            "type": "object",
            "properties": {"size": {"type": "integer", "maximum": 100, "default": 20}, "cursor": {"type": "string"}},
            "additionalProperties": False,
        },
        "filter": {"$ref": "#/$defs/filter"},
    },
    "required": ["invoiceId"],
    "additionalProperties": False,
    "$defs": {
        "filter": {
            "type": "object",
            "properties": {"status": {"enum": ["open", "paid"], "default": "open"}},
            "additionalProperties": False,
        }
    },
}


# --- extraction --------------------------------------------------------------------------------


def test_prose_and_code_fence_are_stripped() -> None:
    text = 'Sure, here are the arguments:\n```json\n{"invoiceId": "inv-2026-091"}\n```\nLet me know!'
    assert extract_json_object(text) == {"invoiceId": "inv-2026-091"}


def test_first_of_several_objects_is_taken() -> None:
    assert extract_json_object('first {"a": 1} then {"b": 2}') == {"a": 1}


def test_braces_inside_strings_and_escapes_do_not_confuse_the_scanner() -> None:
    text = 'x {"a": "}{\\"", "b": [1, {"c": "]"}]} y'
    assert extract_json_object(text) == {"a": '}{"', "b": [1, {"c": "]"}]}


def test_prose_braces_before_the_object_are_skipped() -> None:
    text = 'Use {invoiceId} like { this: "one" }: {"invoiceId": "inv-2026-091"}'
    assert extract_json_object(text) == {"invoiceId": "inv-2026-091"}


def test_an_unclosed_brace_in_prose_does_not_hide_a_later_object() -> None:
    text = 'Open with { and a quote " then:\n```\n{"a": 1}\n```'
    assert extract_json_object(text) == {"a": 1}


@pytest.mark.parametrize("text", ["", "no json here", "[1, 2, 3]", '{"a": 1', "{not json}", '{"a" 1}'])
def test_unparseable_text_is_a_clean_error(text: str) -> None:
    with pytest.raises(ArgumentsUnparseable):
        extract_json_object(text)


def test_deep_nesting_is_rejected_quickly() -> None:
    started = time.perf_counter()
    with pytest.raises(ArgumentsUnparseable, match="deeper than 64"):
        extract_json_object('{"a":' * 10_000 + "1" + "}" * 10_000)
    assert time.perf_counter() - started < 1


def test_nesting_at_the_limit_is_accepted() -> None:
    text = '{"a":' * MAX_DEPTH + "1" + "}" * MAX_DEPTH
    assert extract_json_object(text)["a"]


def test_text_over_one_mebibyte_is_rejected() -> None:
    started = time.perf_counter()
    with pytest.raises(ArgumentsUnparseable, match="longer than"):
        extract_json_object('{"a": "' + "x" * (5 * 1024 * 1024) + '"}')
    assert time.perf_counter() - started < 1


@pytest.mark.parametrize("unit", ['{"a"}', '{"":' + "[]" * 1000, '{"', "{ ]", '{"a": x} '])
def test_hostile_text_is_bounded(unit: str) -> None:
    started = time.perf_counter()
    with pytest.raises(ArgumentsUnparseable):
        extract_json_object(unit * (1024 * 1024 // len(unit)))
    assert time.perf_counter() - started < 2


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=20,
)
prose = st.text().filter(lambda s: "{" not in s and "}" not in s)


@given(st.dictionaries(st.text(), json_values, max_size=6), prose, prose)
def test_object_between_prose_is_found(value: dict, before: str, after: str) -> None:
    assert extract_json_object(before + json.dumps(value) + after) == value


# --- validation --------------------------------------------------------------------------------


def issues(report: ValidationReport, kind: str) -> list[tuple[str, str]]:
    return [(issue["path"], issue["message"]) for issue in msgspec.to_builtins(report)[kind]]


def test_valid_arguments() -> None:
    report = validate_arguments(SCHEMA, {"invoiceId": "inv-2026-091"}, "strict")
    assert report.valid and report.errors == [] and report.arguments == {"invoiceId": "inv-2026-091"}


def test_strict_reports_every_violation_at_its_json_pointer() -> None:
    arguments = {"includeLines": "yes", "page": {"size": 500, "extra": 1}, "a/b~c": 1}
    report = validate_arguments(SCHEMA, arguments, "strict")
    assert not report.valid
    paths = sorted(path for path, _ in issues(report, "errors"))
    assert paths == ["/a~1b~0c", "/includeLines", "/invoiceId", "/page/extra", "/page/size"]
    assert report.arguments == arguments
    assert report.warnings == []


def test_strict_does_not_fill_defaults_or_drop_properties() -> None:
    report = validate_arguments(SCHEMA, {"invoiceId": "inv-2026-091", "x": 1}, "strict")
    assert not report.valid
    assert report.arguments == {"invoiceId": "inv-2026-091", "x": 1}


def test_lenient_fills_defaults_and_drops_unknown_properties_with_warnings() -> None:
    arguments = {"invoiceId": "inv-2026-091", "x": 1, "page": {"cursor": "c", "y": 2}, "filter": {"z": 3}}
    report = validate_arguments(SCHEMA, arguments, "lenient")
    assert report.valid, report.errors
    assert report.arguments == {
        "invoiceId": "inv-2026-091",
        "includeLines": False,
        "page": {"cursor": "c", "size": 20},
        "filter": {"status": "open"},
    }
    assert sorted(path for path, _ in issues(report, "warnings")) == ["/filter/z", "/page/y", "/x"]
    # The caller's arguments are left as they were.
    assert arguments["x"] == 1 and "size" not in arguments["page"]


def test_lenient_still_rejects_real_violations() -> None:
    report = validate_arguments(SCHEMA, {"invoiceId": "INV-1", "x": 1}, "lenient")
    assert not report.valid
    assert issues(report, "errors")[0][0] == "/invoiceId"
    assert issues(report, "warnings")[0][0] == "/x"


def test_lenient_keeps_unknown_properties_where_the_schema_allows_them() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    report = validate_arguments(schema, {"a": 1, "b": 2}, "lenient")
    assert report.valid and report.arguments == {"a": 1, "b": 2} and report.warnings == []


def test_text_arguments_are_extracted() -> None:
    report = validate_arguments(SCHEMA, 'Arguments:\n```json\n{"invoiceId": "inv-2026-091"}\n```', "lenient")
    assert report.valid
    assert report.arguments == {"invoiceId": "inv-2026-091", "includeLines": False}


def test_unparseable_text_is_an_invalid_report() -> None:
    report = validate_arguments(SCHEMA, "I could not find the invoice.", "strict")
    assert not report.valid and report.arguments is None
    assert issues(report, "errors")[0][0] == ""


def test_deeply_nested_arguments_are_rejected_without_recursion() -> None:
    deep: dict = {}
    for _ in range(10_000):
        deep = {"a": deep}
    report = validate_arguments({"type": "object"}, deep, "lenient")
    assert not report.valid and "deeper than 64" in report.errors[0].message


def test_report_is_camel_case_on_the_wire() -> None:
    report = validate_arguments(SCHEMA, {}, "strict")
    assert set(msgspec.to_builtins(report)) == {"valid", "arguments", "errors", "warnings"}


def test_equal_schemas_compile_once() -> None:
    reordered = dict(reversed(list(SCHEMA.items())))
    assert cached_validator(SCHEMA) is cached_validator(reordered)


def test_large_schemas_and_patterns_are_compiled_but_never_kept():
    from registry.core.schema_guard import _compiled, _pattern_validator, pattern_matches

    large = {"type": "object", "properties": {f"p{i:05d}": {"type": "string"} for i in range(4000)}}
    before = _compiled.cache_info().currsize
    assert cached_validator(large).is_valid({"p00001": "x"})
    assert _compiled.cache_info().currsize == before
    patterns = _pattern_validator.cache_info().currsize
    assert pattern_matches("^a" + "b?" * 600 + "$", "a")
    assert _pattern_validator.cache_info().currsize == patterns
