"""registry.versions.compatibility.schemas (through `check_compatibility`, registry.versions.compatibility.verdict):
the breaking-change table of schemas (docs/api.md#compatibility) and subsumption properties. The
skill-field rules: test_compatibility_fields.py.

The table pins kinds and paths. The properties check the checker against a real JSON Schema
validator: whatever it calls compatible must keep every old input valid (and every new output
within the old output schema).
"""

from __future__ import annotations

import copy
from typing import Any

import jsonschema_rs
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from registry.versions.compatibility.breaking_change import BreakingChange
from registry.versions.compatibility.verdict import check_compatibility


def inp(schema: Any, **fields: Any) -> dict[str, Any]:
    return {"inputSchema": schema, "sideEffect": "none", **fields}


def out(schema: Any, **fields: Any) -> dict[str, Any]:
    return {"outputSchema": schema, "sideEffect": "none", **fields}


def obj(properties: dict[str, Any], **keywords: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, **keywords}


STRING = {"type": "string"}
INTEGER = {"type": "integer"}
NUMBER = {"type": "number"}

TREE = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {"value": NUMBER, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        }
    },
    "$ref": "#/$defs/node",
}
TREE_INTEGER = copy.deepcopy(TREE)
TREE_INTEGER["$defs"]["node"]["properties"]["value"] = INTEGER
TREE_DOCUMENTED = copy.deepcopy(TREE)
TREE_DOCUMENTED["$defs"]["node"]["description"] = "a node of the tree"

KIND_A = {"type": "object", "properties": {"kind": {"const": "a"}, "x": STRING}, "required": ["kind"]}
KIND_B = {"type": "object", "properties": {"kind": {"const": "b"}, "y": INTEGER}, "required": ["kind"]}
KIND_C = {"type": "object", "properties": {"kind": {"const": "c"}}, "required": ["kind"]}

IN = "/inputSchema"
OUT = "/outputSchema"

CASES = [
    # --- input: compatible ---------------------------------------------------------------------
    pytest.param(
        inp(obj({"id": STRING}, required=["id"])), inp(obj({"id": STRING}, required=["id"])), set(), id="identical"
    ),
    pytest.param({"sideEffect": "none"}, inp({"type": "object"}), set(), id="missing-input-schema-is-an-object"),
    pytest.param(
        inp(obj({"id": {"type": "string", "description": "old"}})),
        inp(obj({"id": {"type": "string", "description": "new", "title": "Id", "examples": ["x"]}})),
        set(),
        id="annotations-only",
    ),
    pytest.param(
        inp(obj({"id": STRING})), inp(obj({"id": STRING, "note": STRING})), set(), id="optional-property-added"
    ),
    pytest.param(
        inp(obj({"id": STRING})),
        inp(obj({"id": STRING, "lang": {"type": "string", "default": "en"}}, required=["lang"])),
        set(),
        id="required-property-with-default",
    ),
    pytest.param(inp(obj({"id": STRING}, required=["id"])), inp(obj({"id": STRING})), set(), id="required-removed"),
    pytest.param(
        inp(obj({"id": STRING, "x": STRING})), inp(obj({"id": STRING})), set(), id="property-removed-open-object"
    ),
    pytest.param(
        inp(obj({"id": STRING, "x": STRING}, additionalProperties=False)),
        inp(obj({"id": STRING}, additionalProperties=STRING)),
        set(),
        id="property-removed-but-additional-schema-accepts-it",
    ),
    pytest.param(inp(obj({"n": INTEGER})), inp(obj({"n": NUMBER})), set(), id="integer-to-number"),
    pytest.param(inp(obj({"n": STRING})), inp(obj({"n": {"type": ["string", "null"]}})), set(), id="type-widened"),
    pytest.param(
        inp(obj({"c": {"enum": ["eur", "usd"]}})),
        inp(obj({"c": {"enum": ["eur", "usd", "gbp"]}})),
        set(),
        id="enum-widened",
    ),
    pytest.param(
        inp(obj({"n": {"type": "integer", "minimum": 5, "maximum": 10}})),
        inp(obj({"n": {"type": "integer", "minimum": 0, "maximum": 100}})),
        set(),
        id="bounds-loosened",
    ),
    pytest.param(
        inp(obj({"n": {"type": "integer", "minimum": 1}})),
        inp(obj({"n": {"type": "integer", "exclusiveMinimum": 0}})),
        set(),
        id="integer-exclusive-bound-equivalent",
    ),
    pytest.param(
        inp(obj({"n": {"type": "integer", "multipleOf": 10}})),
        inp(obj({"n": {"type": "integer", "multipleOf": 5}})),
        set(),
        id="multipleOf-divisor",
    ),
    pytest.param(
        inp(obj({"s": {"type": "string", "pattern": "^[a-z]+$", "format": "email"}})),
        inp(obj({"s": STRING})),
        set(),
        id="pattern-and-format-removed",
    ),
    pytest.param(
        inp(obj({"id": STRING}, additionalProperties=False)),
        inp(obj({"id": STRING})),
        set(),
        id="additional-properties-opened",
    ),
    pytest.param(
        inp({"allOf": [{"type": "object"}, {"properties": {"a": STRING}}]}),
        inp(obj({"a": STRING})),
        set(),
        id="allOf-merged-into-one-schema",
    ),
    pytest.param(
        inp({"$defs": {"id": STRING}, "type": "object", "properties": {"a": {"$ref": "#/$defs/id"}}}),
        inp(obj({"a": STRING})),
        set(),
        id="ref-inlined",
    ),
    pytest.param(inp(TREE), inp(TREE_DOCUMENTED), set(), id="recursive-ref-documented"),
    pytest.param(
        inp(obj({"v": {"anyOf": [STRING]}})),
        inp(obj({"v": {"anyOf": [STRING, INTEGER]}})),
        set(),
        id="anyOf-branch-added",
    ),
    pytest.param(
        inp(obj({"v": {"oneOf": [KIND_A, KIND_B]}})),
        inp(obj({"v": {"oneOf": [KIND_A, KIND_B, KIND_C]}})),
        set(),
        id="oneOf-discriminated-branch-added",
    ),
    pytest.param(inp(obj({"v": {"not": STRING}})), inp(obj({"v": {}})), set(), id="not-removed"),
    pytest.param(inp(obj({"v": STRING})), inp(obj({"v": True})), set(), id="property-became-true"),
    pytest.param(inp(obj({"v": False})), inp(obj({"v": INTEGER})), set(), id="property-was-false"),
    # --- input: breaking -----------------------------------------------------------------------
    pytest.param(
        inp(obj({"id": STRING})),
        inp(obj({"id": STRING, "invoiceId": STRING}, required=["invoiceId"])),
        {("required_added", f"{IN}/properties/invoiceId")},
        id="required-added",
    ),
    pytest.param(
        inp(obj({"id": STRING})),
        inp({"allOf": [obj({"id": STRING}), {"required": ["id"]}]}),
        {("required_added", f"{IN}/properties/id")},
        id="required-added-through-allOf",
    ),
    pytest.param(
        inp(obj({"id": STRING, "x": STRING}, additionalProperties=False)),
        inp(obj({"id": STRING}, additionalProperties=False)),
        {("property_removed", f"{IN}/properties/x")},
        id="property-removed-closed-object",
    ),
    pytest.param(
        inp(obj({"id": STRING, "x": INTEGER}, additionalProperties=False)),
        inp(obj({"id": STRING}, additionalProperties=STRING)),
        {("property_removed", f"{IN}/properties/x")},
        id="property-removed-additional-schema-rejects-it",
    ),
    pytest.param(
        inp(obj({"n": NUMBER})),
        inp(obj({"n": INTEGER})),
        {("type_narrowed", f"{IN}/properties/n/type")},
        id="number-to-integer",
    ),
    pytest.param(
        inp(obj({"n": {"type": ["string", "null"]}})),
        inp(obj({"n": STRING})),
        {("type_narrowed", f"{IN}/properties/n/type")},
        id="null-dropped",
    ),
    pytest.param(
        inp(obj({"n": {}})), inp(obj({"n": STRING})), {("type_narrowed", f"{IN}/properties/n/type")}, id="type-added"
    ),
    pytest.param(
        inp(obj({"c": {"enum": ["eur", "usd"]}})),
        inp(obj({"c": {"enum": ["eur"]}})),
        {("enum_narrowed", f"{IN}/properties/c/enum")},
        id="enum-value-removed",
    ),
    pytest.param(
        inp(obj({"c": STRING})),
        inp(obj({"c": {"type": "string", "enum": ["eur"]}})),
        {("enum_narrowed", f"{IN}/properties/c/enum")},
        id="enum-added",
    ),
    pytest.param(
        inp(obj({"c": STRING})),
        inp(obj({"c": {"const": "eur"}})),
        {("const_changed", f"{IN}/properties/c/const")},
        id="const-added",
    ),
    pytest.param(
        inp(obj({"c": {"const": "eur"}})),
        inp(obj({"c": {"const": "usd"}})),
        {("const_changed", f"{IN}/properties/c/const")},
        id="const-changed",
    ),
    pytest.param(
        inp(obj({"n": {"type": "number", "minimum": 0}})),
        inp(obj({"n": {"type": "number", "minimum": 1}})),
        {("bound_tightened", f"{IN}/properties/n/minimum")},
        id="minimum-raised",
    ),
    pytest.param(
        inp(obj({"n": {"type": "number", "maximum": 10}})),
        inp(obj({"n": {"type": "number", "exclusiveMaximum": 10}})),
        {("bound_tightened", f"{IN}/properties/n/exclusiveMaximum")},
        id="maximum-made-exclusive",
    ),
    pytest.param(
        inp(obj({"s": {"type": "string", "maxLength": 64}})),
        inp(obj({"s": {"type": "string", "minLength": 1, "maxLength": 32}})),
        {("bound_tightened", f"{IN}/properties/s/minLength"), ("bound_tightened", f"{IN}/properties/s/maxLength")},
        id="string-lengths-tightened",
    ),
    pytest.param(
        inp(obj({"l": {"type": "array", "items": STRING}})),
        inp(obj({"l": {"type": "array", "items": STRING, "minItems": 1, "uniqueItems": True}})),
        {("bound_tightened", f"{IN}/properties/l/minItems"), ("bound_tightened", f"{IN}/properties/l/uniqueItems")},
        id="array-min-items-and-unique-items",
    ),
    pytest.param(
        inp(obj({"m": {"type": "object"}})),
        inp(obj({"m": {"type": "object", "maxProperties": 3}})),
        {("bound_tightened", f"{IN}/properties/m/maxProperties")},
        id="max-properties-added",
    ),
    pytest.param(
        inp(obj({"n": {"type": "integer", "multipleOf": 5}})),
        inp(obj({"n": {"type": "integer", "multipleOf": 10}})),
        {("bound_tightened", f"{IN}/properties/n/multipleOf")},
        id="multipleOf-non-divisor",
    ),
    pytest.param(
        inp(obj({"s": STRING})),
        inp(obj({"s": {"type": "string", "pattern": "^inv-"}})),
        {("pattern_added", f"{IN}/properties/s/pattern")},
        id="pattern-added",
    ),
    pytest.param(
        inp(obj({"s": {"type": "string", "pattern": "^inv-"}})),
        inp(obj({"s": {"type": "string", "pattern": "^INV-"}})),
        {("pattern_added", f"{IN}/properties/s/pattern")},
        id="pattern-changed",
    ),
    pytest.param(
        inp(obj({"s": STRING})),
        inp(obj({"s": {"type": "string", "format": "date"}})),
        {("format_added", f"{IN}/properties/s/format")},
        id="format-added",
    ),
    pytest.param(
        inp(obj({"id": STRING})),
        inp(obj({"id": STRING}, additionalProperties=False)),
        {("additional_properties_narrowed", f"{IN}/additionalProperties")},
        id="additional-properties-closed",
    ),
    pytest.param(
        inp(obj({"id": STRING}, additionalProperties=True)),
        inp(obj({"id": STRING}, additionalProperties=STRING)),
        {("additional_properties_narrowed", f"{IN}/additionalProperties")},
        id="additional-properties-restricted",
    ),
    pytest.param(
        inp(obj({}, additionalProperties={"type": ["string", "integer"]})),
        inp(obj({}, additionalProperties=STRING)),
        {("type_narrowed", f"{IN}/additionalProperties/type")},
        id="additional-properties-schema-narrowed",
    ),
    pytest.param(
        inp(obj({"l": {"type": "array", "items": NUMBER}})),
        inp(obj({"l": {"type": "array", "items": INTEGER}})),
        {("type_narrowed", f"{IN}/properties/l/items/type")},
        id="items-narrowed",
    ),
    pytest.param(
        inp(obj({"t": {"type": "array", "prefixItems": [STRING, NUMBER]}})),
        inp(obj({"t": {"type": "array", "prefixItems": [STRING, INTEGER]}})),
        {("type_narrowed", f"{IN}/properties/t/prefixItems/1/type")},
        id="prefix-items-narrowed",
    ),
    pytest.param(
        inp(obj({"customer": obj({"id": NUMBER, "name": STRING})})),
        inp(obj({"customer": obj({"id": INTEGER, "name": STRING}, required=["name"])})),
        {
            ("type_narrowed", f"{IN}/properties/customer/properties/id/type"),
            ("required_added", f"{IN}/properties/customer/properties/name"),
        },
        id="nested-object",
    ),
    pytest.param(
        inp({"$defs": {"amount": NUMBER}, "type": "object", "properties": {"a": {"$ref": "#/$defs/amount"}}}),
        inp({"$defs": {"amount": INTEGER}, "type": "object", "properties": {"a": {"$ref": "#/$defs/amount"}}}),
        {("type_narrowed", f"{IN}/properties/a/type")},
        id="ref-target-narrowed",
    ),
    pytest.param(
        inp(
            {"definitions": {"amount": NUMBER}, "type": "object", "properties": {"a": {"$ref": "#/definitions/amount"}}}
        ),
        inp(
            {
                "definitions": {"amount": {"type": "number", "maximum": 9}},
                "type": "object",
                "properties": {"a": {"$ref": "#/definitions/amount"}},
            }
        ),
        {("bound_tightened", f"{IN}/properties/a/maximum")},
        id="draft7-definitions-ref",
    ),
    pytest.param(
        inp(TREE), inp(TREE_INTEGER), {("type_narrowed", f"{IN}/properties/value/type")}, id="recursive-ref-narrowed"
    ),
    pytest.param(
        inp(obj({"x": STRING})),
        inp(
            {
                "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                "type": "object",
                "properties": {"x": {"$ref": "#/$defs/a"}},
            }
        ),
        {("undecidable", f"{IN}/properties/x")},
        id="reference-cycle",
    ),
    pytest.param(
        inp(obj({"x": STRING})),
        inp(obj({"x": {"$ref": "https://schemas.example/x.json"}})),
        {("undecidable", f"{IN}/properties/x")},
        id="remote-ref",
    ),
    pytest.param(
        inp(obj({"v": {"anyOf": [STRING, INTEGER]}})),
        inp(obj({"v": {"anyOf": [STRING]}})),
        {("type_narrowed", f"{IN}/properties/v/anyOf/1")},
        id="anyOf-branch-removed",
    ),
    pytest.param(
        inp(obj({"v": {"anyOf": [{"minimum": 0}, {"maximum": 10}]}})),
        inp(obj({"v": {"anyOf": [{"minimum": 5}, {"maximum": 3}]}})),
        {("undecidable", f"{IN}/properties/v/anyOf/0"), ("undecidable", f"{IN}/properties/v/anyOf/1")},
        id="anyOf-unsure",
    ),
    pytest.param(
        inp(obj({"v": {"type": "string"}})),
        inp(obj({"v": {"oneOf": [STRING, {"type": "string", "maxLength": 3}]}})),
        {("undecidable", f"{IN}/properties/v")},
        id="oneOf-overlapping-branches",
    ),
    pytest.param(
        inp(obj({"v": STRING})),
        inp(obj({"v": False})),
        {("type_narrowed", f"{IN}/properties/v")},
        id="property-became-false",
    ),
    pytest.param(
        inp(obj({"v": {}})),
        inp(obj({"v": {"if": {"type": "string"}, "then": {"minLength": 1}}})),
        {("undecidable", f"{IN}/properties/v/if")},
        id="if-then-added",
    ),
    pytest.param(
        inp(obj({"v": {"not": STRING}})),
        inp(obj({"v": {"not": NUMBER}})),
        {("undecidable", f"{IN}/properties/v/not")},
        id="not-changed",
    ),
    pytest.param(
        inp(obj({}, patternProperties={"^x-": STRING})),
        inp(obj({}, patternProperties={"^x-": INTEGER})),
        {("undecidable", f"{IN}/patternProperties")},
        id="pattern-properties-changed",
    ),
    pytest.param(
        inp(obj({"a": STRING, "b": STRING})),
        inp(obj({"a": STRING, "b": STRING}, dependentSchemas={"a": {"required": ["b"]}})),
        {("undecidable", f"{IN}/dependentSchemas")},
        id="dependent-schemas-added",
    ),
    # --- output --------------------------------------------------------------------------------
    pytest.param(
        out(obj({"total": NUMBER})), out(obj({"total": NUMBER, "currency": STRING})), set(), id="output-property-added"
    ),
    pytest.param(out(obj({"n": NUMBER})), out(obj({"n": INTEGER})), set(), id="output-type-narrowed"),
    pytest.param(
        out(obj({"c": {"enum": ["a", "b"]}})), out(obj({"c": {"enum": ["a"]}})), set(), id="output-enum-narrowed"
    ),
    pytest.param(out(obj({"n": NUMBER})), out(obj({"n": NUMBER}, required=["n"])), set(), id="output-made-required"),
    pytest.param({"sideEffect": "none"}, out(obj({"n": NUMBER})), set(), id="output-from-anything-to-typed"),
    pytest.param(
        out(obj({"total": NUMBER, "currency": STRING})),
        out(obj({"total": NUMBER})),
        {("output_property_removed", f"{OUT}/properties/currency")},
        id="output-property-removed",
    ),
    pytest.param(
        out(obj({"total": NUMBER}, required=["total"])),
        out(obj({"total": NUMBER})),
        {("output_property_optional", f"{OUT}/properties/total")},
        id="output-property-made-optional",
    ),
    pytest.param(
        out(obj({"n": INTEGER})),
        out(obj({"n": NUMBER})),
        {("type_widened", f"{OUT}/properties/n/type")},
        id="output-type-widened",
    ),
    pytest.param(
        out(obj({"c": {"enum": ["a", "b"]}})),
        out(obj({"c": {"enum": ["a", "b", "c"]}})),
        {("enum_widened", f"{OUT}/properties/c/enum")},
        id="output-enum-widened",
    ),
    pytest.param(
        out(obj({"n": {"type": "integer", "maximum": 10}})),
        out(obj({"n": {"type": "integer", "maximum": 20}})),
        {("bound_loosened", f"{OUT}/properties/n/maximum")},
        id="output-bound-loosened",
    ),
    pytest.param(
        out(obj({"a": STRING}, additionalProperties=False)),
        out(obj({"a": STRING, "b": STRING}, additionalProperties=False)),
        {("output_property_added", f"{OUT}/properties/b")},
        id="output-closed-object-gains-property",
    ),
    pytest.param(
        out(obj({"v": {"anyOf": [STRING]}})),
        out(obj({"v": {"anyOf": [STRING, INTEGER]}})),
        {("type_widened", f"{OUT}/properties/v/anyOf/1")},
        id="output-anyOf-branch-added",
    ),
]


@pytest.mark.parametrize(("old", "new", "expected"), CASES)
def test_breaking_change_table(old: dict, new: dict, expected: set[tuple[str, str]]) -> None:
    changes = check_compatibility(old, new)
    assert {(c.kind, c.path) for c in changes} == expected, [msgspec.to_builtins(c) for c in changes]
    assert all(isinstance(c, BreakingChange) and c.message.strip() for c in changes)
    assert len(changes) == len({(c.kind, c.path, c.message) for c in changes})  # no duplicates


def test_table_covers_every_kind() -> None:
    kinds = {kind for case in CASES for kind, _ in case.values[2]}
    assert kinds >= {
        "required_added",
        "property_removed",
        "type_narrowed",
        "type_widened",
        "enum_narrowed",
        "enum_widened",
        "bound_tightened",
        "pattern_added",
        "format_added",
        "additional_properties_narrowed",
        "output_property_removed",
        "output_property_optional",
        "undecidable",
    }
    assert len(CASES) >= 40


def test_breaking_change_serialises_as_the_contract_error_item() -> None:
    [change] = check_compatibility(inp(obj({"n": NUMBER})), inp(obj({"n": INTEGER})))
    assert msgspec.json.decode(msgspec.json.encode(change)) == {
        "path": "/inputSchema/properties/n/type",
        "kind": "type_narrowed",
        "message": change.message,
    }
    assert "number" in change.message and "integer" in change.message


def test_json_equality_tells_booleans_from_numbers() -> None:
    # In Python True == 1; in JSON they are different values.
    changes = check_compatibility(inp(obj({"v": {"enum": [True]}})), inp(obj({"v": {"enum": [1]}})))
    assert {(c.kind, c.path) for c in changes} == {("enum_narrowed", f"{IN}/properties/v/enum")}
    assert check_compatibility(inp(obj({"v": {"enum": [1]}})), inp(obj({"v": {"enum": [1.0]}}))) == []


def test_escaped_pointer_and_deep_documents_do_not_crash() -> None:
    changes = check_compatibility(inp(obj({"a/b~c": NUMBER})), inp(obj({"a/b~c": INTEGER})))
    assert [c.path for c in changes] == ["/inputSchema/properties/a~1b~0c/type"]
    deep_old: Any = NUMBER
    deep_new: Any = INTEGER
    for _ in range(400):
        deep_old, deep_new = obj({"x": deep_old}), obj({"x": deep_new})
    [change] = check_compatibility(inp(deep_old), inp(deep_new))
    assert change.kind == "undecidable"


# ---------------------------------------------------------------------------------------------
# Properties, checked against a real validator

NAMES = ["a", "b", "c", "d"]
# Patterns the instance generator can satisfy by choosing the alphabet.
PATTERNS = {"^[a-z]*$": "abxyz", "^[0-9]*$": "0179"}
ENUM_POOL = ["x", "y", "z", 1, 2, 2.5, True, None]


def _bounds(draw: Any, schema: dict[str, Any]) -> None:
    low = draw(st.none() | st.integers(-20, 20))
    high = draw(st.none() | st.integers(-20, 20))
    if low is not None and high is not None:
        low, high = min(low, high), max(low, high) + 2  # never empty, even with exclusive bounds
    if low is not None:
        schema[draw(st.sampled_from(["minimum", "exclusiveMinimum"]))] = low
    if high is not None:
        schema[draw(st.sampled_from(["maximum", "exclusiveMaximum"]))] = high


@st.composite
def leaf_schemas(draw: Any, allow_array: bool = True) -> dict[str, Any]:
    kinds = ["integer", "number", "string", "string-enum", "boolean", "enum"] + (["array"] if allow_array else [])
    kind = draw(st.sampled_from(kinds))
    if kind in ("integer", "number"):
        schema: dict[str, Any] = {"type": kind}
        _bounds(draw, schema)
        return schema
    if kind == "string":
        schema = {"type": "string"}
        low = draw(st.none() | st.integers(0, 3))
        high = draw(st.none() | st.integers(3, 8))
        if low is not None:
            schema["minLength"] = low
        if high is not None:
            schema["maxLength"] = high
        if draw(st.booleans()):
            schema["pattern"] = draw(st.sampled_from(sorted(PATTERNS)))
        return schema
    if kind == "string-enum":
        return {
            "type": "string",
            "enum": draw(st.lists(st.sampled_from(["x", "y", "z"]), min_size=1, max_size=3, unique=True)),
        }
    if kind == "boolean":
        return {"type": "boolean"}
    if kind == "enum":
        return {"enum": draw(st.lists(st.sampled_from(ENUM_POOL), min_size=1, max_size=4, unique_by=repr))}
    schema = {"type": "array", "items": draw(leaf_schemas(allow_array=False))}
    unique = draw(st.booleans())
    if unique:
        schema["uniqueItems"] = True
    if draw(st.booleans()):
        schema["minItems"] = draw(st.integers(0, 1))
    if draw(st.booleans()):
        schema["maxItems"] = draw(st.integers(2, 4))
    return schema


@st.composite
def object_schemas(draw: Any, depth: int = 0) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=4))
    properties = {
        name: draw(object_schemas(depth + 1)) if depth == 0 and draw(st.integers(0, 4)) == 0 else draw(leaf_schemas())
        for name in names
    }
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    required = draw(st.lists(st.sampled_from(names), unique=True)) if names else []
    if required:
        schema["required"] = required
    additional = draw(st.sampled_from(["absent", "true", "false", "schema"]))
    if additional == "true":
        schema["additionalProperties"] = True
    elif additional == "false":
        schema["additionalProperties"] = False
    elif additional == "schema":
        schema["additionalProperties"] = draw(leaf_schemas(allow_array=False))
    return schema


def instances(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values valid under a schema of the grammar above (filtered by the real validator too)."""
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if isinstance(kind, list):  # a widened type: instances of any of its members
        return st.one_of(*(instances({**schema, "type": member}) for member in kind))
    if kind in ("integer", "number"):
        low, high = schema.get("minimum"), schema.get("maximum")
        if "exclusiveMinimum" in schema:
            low = schema["exclusiveMinimum"] + 1
        if "exclusiveMaximum" in schema:
            high = schema["exclusiveMaximum"] - 1
        # Changed schemas may have empty ranges: such a schema has no instances.
        integers = st.nothing() if low is not None and high is not None and low > high else st.integers(low, high)
        float_low = schema.get("minimum", schema.get("exclusiveMinimum"))
        float_high = schema.get("maximum", schema.get("exclusiveMaximum"))
        if kind == "integer" or (float_low is not None and float_high is not None and float_low >= float_high):
            return integers
        floats = st.floats(
            min_value=float_low,
            max_value=float_high,
            exclude_min="exclusiveMinimum" in schema,
            exclude_max="exclusiveMaximum" in schema,
            allow_nan=False,
            allow_infinity=False,
        )
        return integers | floats
    if kind == "string":
        alphabet = PATTERNS.get(schema.get("pattern", ""), "ab1-")
        low = schema.get("minLength", 0)
        high = schema.get("maxLength", low + 6)
        return st.nothing() if low > high else st.text(alphabet=alphabet, min_size=low, max_size=high)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        low = schema.get("minItems", 0)
        items = instances(schema["items"])
        if low > schema.get("maxItems", low) or (items.is_empty and low > 0):
            return st.nothing()
        if items.is_empty:
            return st.just([])
        return st.lists(
            items,
            min_size=low,
            max_size=schema.get("maxItems", low + 3),
            unique=bool(schema.get("uniqueItems")),
        )
    properties = schema.get("properties", {})
    required = set(schema.get("required", []))
    declared = st.fixed_dictionaries(
        {name: instances(properties[name]) for name in properties if name in required},
        optional={name: instances(properties[name]) for name in properties if name not in required},
    )
    additional = schema.get("additionalProperties")
    # Undeclared properties only where the old schema states what they may be: an open object's
    # unknown properties are assumed unused (the checker's documented rule).
    if not isinstance(additional, dict):
        return declared
    free_names = [name for name in NAMES if name not in properties]
    if not free_names:
        return declared
    extra = st.dictionaries(st.sampled_from(free_names), instances(additional), max_size=2)
    return st.tuples(declared, extra).map(lambda parts: {**parts[1], **parts[0]})


def _some(data: st.DataObject, strategy: st.SearchStrategy[Any]) -> list[Any]:
    # A changed schema can be unsatisfiable (say minimum above maximum): it has no instances.
    return [] if strategy.is_empty else data.draw(st.lists(strategy, min_size=1, max_size=4))


def _subschemas(schema: dict[str, Any]) -> list[dict[str, Any]]:
    found = [schema]
    for child in schema.get("properties", {}).values():
        found += _subschemas(child)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            found += _subschemas(schema[key])
    return found


def _loosen(draw: Any, node: dict[str, Any]) -> None:
    """One change that lets the schema accept more (or the same)."""
    options = []
    if node.get("required"):
        options.append("unrequire")
    options += [k for k in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum") if k in node]
    options += [k for k in ("pattern", "minLength", "maxLength", "minItems", "maxItems", "uniqueItems") if k in node]
    if "enum" in node:
        options.append("enum")
    if node.get("type") == "integer":
        options.append("integer")
    if "additionalProperties" in node and node["additionalProperties"] is not True:
        options.append("additionalProperties")
    if not options:
        return
    option = draw(st.sampled_from(options))
    if option == "unrequire":
        node["required"].remove(draw(st.sampled_from(node["required"])))
    elif option in ("minimum", "exclusiveMinimum"):
        if draw(st.booleans()):
            del node[option]
        else:
            node[option] -= draw(st.integers(0, 5))
    elif option in ("maximum", "exclusiveMaximum", "maxLength", "maxItems"):
        if draw(st.booleans()):
            del node[option]
        else:
            node[option] += draw(st.integers(0, 5))
    elif option == "enum":
        extra = draw(st.sampled_from([*ENUM_POOL, "w"]))
        if not any(type(extra) is type(v) and extra == v for v in node["enum"]):
            node["enum"].append(extra)
    elif option == "integer":
        node["type"] = "number"
    elif option == "minLength" or option == "minItems":
        node[option] = max(0, node[option] - draw(st.integers(0, 2)))
    else:  # pattern, uniqueItems, additionalProperties
        del node[option]


def _change(draw: Any, node: dict[str, Any]) -> None:
    """Any change, loosening or tightening, for the property that the verdict is sound."""
    option = draw(
        st.sampled_from(
            ["loosen", "require", "add", "drop", "retype", "bound", "close", "replace", "unique", "pattern"]
        )
    )
    if option == "loosen":
        _loosen(draw, node)
    elif node.get("type") == "object":
        names = list(node["properties"])
        if option == "require" and names:
            node["required"] = sorted(set(node.get("required", [])) | {draw(st.sampled_from(names))})
        elif option == "add":
            node["properties"][draw(st.sampled_from(NAMES))] = draw(leaf_schemas())
        elif option == "drop" and names:
            name = draw(st.sampled_from(names))
            del node["properties"][name]
            if name in node.get("required", []):
                node["required"].remove(name)
        elif option == "close":
            node["additionalProperties"] = (
                draw(st.sampled_from([False, True])) if draw(st.booleans()) else draw(leaf_schemas(allow_array=False))
            )
        elif option == "replace" and names:
            node["properties"][draw(st.sampled_from(names))] = draw(leaf_schemas())
    elif option == "retype" and node.get("type") in ("integer", "number", "string", "boolean"):
        node["type"] = draw(st.sampled_from(["integer", "number", "string", "boolean", ["integer", "string"]]))
    elif option == "bound" and node.get("type") in ("integer", "number"):
        node[draw(st.sampled_from(["minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum", "multipleOf"]))] = (
            draw(st.integers(1, 9))
        )
    elif option == "unique" and node.get("type") == "array":
        node["uniqueItems"] = True
    elif option == "pattern" and node.get("type") == "string":
        node["pattern"] = draw(st.sampled_from(sorted(PATTERNS)))
    elif option == "bound" and node.get("type") == "string":
        node[draw(st.sampled_from(["minLength", "maxLength"]))] = draw(st.integers(0, 6))
    elif "enum" in node and len(node["enum"]) > 1:
        node["enum"].pop(draw(st.integers(0, len(node["enum"]) - 1)))


@st.composite
def changed(draw: Any, schema: dict[str, Any], loosen_only: bool) -> dict[str, Any]:
    result = copy.deepcopy(schema)
    for _ in range(draw(st.integers(1, 3))):
        node = draw(st.sampled_from(_subschemas(result)))
        (_loosen if loosen_only else _change)(draw, node)
    return result


def _documented(schema: Any) -> Any:
    """The same schema with an annotation on every subschema: equal meaning, unequal JSON."""
    if isinstance(schema, dict):
        result = {
            k: _documented(v) if k in ("properties", "items", "additionalProperties") else v for k, v in schema.items()
        }
        if "properties" in schema:
            result["properties"] = {name: _documented(s) for name, s in schema["properties"].items()}
        result["description"] = "documented"
        return result
    return schema


SETTINGS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)


@SETTINGS
@given(object_schemas())
def test_every_schema_is_compatible_with_itself(schema: dict[str, Any]) -> None:
    assert check_compatibility(inp(schema), inp(copy.deepcopy(schema))) == []
    # Annotations everywhere defeat the identical-subschema shortcut: the full analysis must agree.
    assert check_compatibility(inp(schema), inp(_documented(schema))) == []
    assert check_compatibility(out(_documented(schema)), out(schema)) == []


@SETTINGS
@given(st.data())
def test_loosening_input_is_compatible(data: st.DataObject) -> None:
    old = data.draw(object_schemas())
    new = data.draw(changed(old, loosen_only=True))
    assert check_compatibility(inp(old), inp(new)) == []
    # The mirror image: an output schema that gets stricter is compatible too.
    assert check_compatibility(out(new), out(old)) == []


@SETTINGS
@given(st.data())
def test_compatible_input_keeps_old_instances_valid(data: st.DataObject) -> None:
    old = data.draw(object_schemas())
    new = data.draw(changed(old, loosen_only=data.draw(st.booleans())))
    if check_compatibility(inp(old), inp(new)):
        return
    old_validator, new_validator = jsonschema_rs.validator_for(old), jsonschema_rs.validator_for(new)
    for instance in _some(data, instances(old)):
        if old_validator.is_valid(instance):
            assert new_validator.is_valid(instance), (old, new, instance)


@SETTINGS
@given(st.data())
def test_compatible_output_keeps_new_outputs_within_old_schema(data: st.DataObject) -> None:
    old = data.draw(object_schemas())
    new = data.draw(changed(old, loosen_only=False))
    if check_compatibility(out(old), out(new)):
        return
    old_validator, new_validator = jsonschema_rs.validator_for(old), jsonschema_rs.validator_for(new)
    for instance in _some(data, instances(new)):
        if new_validator.is_valid(instance):
            assert old_validator.is_valid(instance), (old, new, instance)


def test_the_properties_see_both_verdicts() -> None:
    # Guard against a vacuous soundness property: the mutations give compatible and breaking pairs.
    verdicts = []

    @settings(max_examples=100, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.data())
    def collect(data: st.DataObject) -> None:
        old = data.draw(object_schemas())
        new = data.draw(changed(old, loosen_only=False))
        verdicts.append(not check_compatibility(inp(old), inp(new)))

    collect()
    assert verdicts.count(True) >= 10 and verdicts.count(False) >= 10
