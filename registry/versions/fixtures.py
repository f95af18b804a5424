"""Behaviour fixtures of a skill version (docs/api.md#behaviour-fixtures): the checks a registration's
fixtures must pass, against the version's own schemas, and the JSON comparisons the replay judge
(registry.versions.replay_judge) uses. Pure: no I/O; run inside registry.core.bounded_work's workers with the
rest of a registration's preparation, so a registrant's schema never runs on the event loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jsonschema_rs
import msgspec

from registry.core.json_pointer import escape_token
from registry.core.problems import ErrorItem
from registry.core.records import MAX_FIXTURE_BYTES, SIDE_EFFECT_ORDER, Fixture, SkillRegistration
from registry.core.schema_guard import MAX_VALUE_DEPTH, SchemaRejected, cached_validator

_encoder = msgspec.json.Encoder(order="sorted")
# A validator's findings quoted in one error message at most.
_MAX_FINDINGS = 5


def json_depth(value: Any, limit: int = MAX_VALUE_DEPTH) -> int:
    """Nesting depth of containers (1 for a scalar), counted up to `limit + 1` (iterative: no
    recursion on hostile input)."""
    deepest = 1
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        current, depth = stack.pop()
        children = current.values() if isinstance(current, dict) else current if isinstance(current, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                deepest = max(deepest, depth + 1)
                if deepest > limit:
                    return deepest
                stack.append((child, depth + 1))
    return deepest


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: numbers by value (1 equals 1.0), but a boolean is never a number (Python's
    `True == 1` is not JSON's). Callers bound the depth (MAX_VALUE_DEPTH) before comparing."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=False))
    return type(a) is type(b) and a == b


def first_difference(expected: Any, actual: Any, pointer: str = "") -> str | None:
    """Where `actual` does not contain `expected` (None: it does). Containment: every member of an
    expected object present in the actual one with a contained value, recursively; arrays and
    scalars equal (json_equal)."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return pointer or "/"
        for name, value in expected.items():
            at = f"{pointer}/{escape_token(name)}"
            if name not in actual:
                return at
            found = first_difference(value, actual[name], at)
            if found is not None:
                return found
        return None
    return None if json_equal(expected, actual) else (pointer or "/")


def schema_findings(validator: jsonschema_rs.Draft202012Validator, instance: Any) -> list[str]:
    """Up to _MAX_FINDINGS of a validator's errors on `instance`, each with its location."""
    findings = []
    for error in validator.iter_errors(instance):
        where = "".join(f"/{escape_token(str(token))}" for token in error.instance_path) or "/"
        findings.append(f"at {where}: {error.message[:300]}")
        if len(findings) >= _MAX_FINDINGS:
            break
    return findings


def _validator(schema: Any) -> jsonschema_rs.Draft202012Validator | None:
    try:
        return cached_validator(schema)
    except SchemaRejected:
        return None  # reported by the schema checks themselves


def fixture_errors(skill: SkillRegistration, base: str, *, schemas_valid: bool) -> list[ErrorItem]:
    """Why the skill's fixtures are not acceptable (empty when they are); `base` is the skill's
    pointer (`/skills/0`). Inputs and expected outputs are validated against the version's own
    schemas only when those are valid (`schemas_valid`), else their own errors say enough."""
    if not skill.fixtures:
        return []  # no schema compiled twice for the (usual) version without fixtures
    errors: list[ErrorItem] = []
    seen: set[str] = set()
    bound = SIDE_EFFECT_ORDER[skill.side_effect]
    inputs = _validator(skill.input_schema) if schemas_valid else None
    outputs = _validator(skill.output_schema) if schemas_valid else None
    for index, fixture in enumerate(skill.fixtures):
        at = f"{base}/fixtures/{index}"
        errors += _one_fixture_errors(fixture, at, seen, bound, skill.side_effect, inputs, outputs)
    return errors


def _one_fixture_errors(
    fixture: Fixture,
    at: str,
    seen: set[str],
    bound: int,
    side_effect: str,
    inputs: jsonschema_rs.Draft202012Validator | None,
    outputs: jsonschema_rs.Draft202012Validator | None,
) -> list[ErrorItem]:
    errors: list[ErrorItem] = []
    if fixture.name in seen:
        errors.append(
            ErrorItem(path=f"{at}/name", message=f"fixture name {fixture.name!r} appears twice in this version")
        )
    seen.add(fixture.name)
    size = len(_encoder.encode(fixture))
    if size > MAX_FIXTURE_BYTES:
        return errors + [
            ErrorItem(path=at, message=f"a fixture is at most {MAX_FIXTURE_BYTES} bytes of JSON; this one is {size}")
        ]
    if SIDE_EFFECT_ORDER[fixture.expect.side_effect] > bound:
        errors.append(
            ErrorItem(
                path=f"{at}/expect/sideEffect",
                message=f"a fixture cannot expect more side effect ({fixture.expect.side_effect}) than the version declares ({side_effect})",
            )
        )
    checks: Sequence[tuple[str, Any, jsonschema_rs.Draft202012Validator | None, str]] = [
        (f"{at}/input", fixture.input, inputs, "inputSchema"),
    ]
    if fixture.expect.output is not msgspec.UNSET:
        checks = [*checks, (f"{at}/expect/output", fixture.expect.output, outputs, "outputSchema")]
    for pointer, value, validator, schema_name in checks:
        if json_depth(value) > MAX_VALUE_DEPTH:
            errors.append(ErrorItem(path=pointer, message=f"nested deeper than {MAX_VALUE_DEPTH} levels"))
            continue
        if validator is None:
            continue
        findings = schema_findings(validator, value)
        if findings:
            errors.append(
                ErrorItem(
                    path=pointer,
                    message=f"does not validate against the version's {schema_name}: " + "; ".join(findings),
                )
            )
    return errors


def fixtures_content(skill: SkillRegistration) -> list[dict[str, Any]]:
    """The fixtures as stored and released (camelCase JSON; an absent `expect.output` stays absent)."""
    return msgspec.to_builtins(skill.fixtures)
