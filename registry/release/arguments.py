"""Tool-call arguments: tolerant extraction of a JSON object from model output, and validation
against a capability's input schema (strict, or lenient with defaults and unknown-property
removal). Pure functions: no I/O; `validate_arguments_bounded` runs them in
`registry.core.bounded_work`'s worker processes.

Work is bounded: text over 1 MiB, nesting deeper than 64 and pathological inputs are rejected
with `ArgumentsUnparseable` or a validation error, never with RecursionError or unbounded time.
Lenient repair produces at most MAX_REPAIR_NODES JSON values and never nests deeper than
MAX_DEPTH. A registrant's `patternProperties` run only in jsonschema-rs's linear-time regex engine
(registry.core.schema_guard), never in Python's backtracking `re`.
"""

from __future__ import annotations

import copy
import re
from typing import Any, Literal

import jsonschema_rs
import msgspec

from registry.core.bounded_work import WorkFailed, WorkTimedOut, run_bounded
from registry.core.json_pointer import escape_token, unescape_token
from registry.core.schema_guard import MAX_VALUE_DEPTH, SchemaRejected, cached_validator, pattern_matches
from registry.core.wire import Wire

MAX_TEXT_BYTES = 1024 * 1024
MAX_DEPTH = MAX_VALUE_DEPTH
# Scanning restarts at each `{` that did not start an object; without caps, hostile text (many
# unclosed or invalid candidates) would cost time quadratic in its length.
SCAN_BUDGET_CHARS = 2 * MAX_TEXT_BYTES
MAX_CANDIDATES = 1000
# Defaults are filled in and then repaired in turn: a `$defs` chain of K levels with two defaulted
# object properties each would otherwise turn `{}` into 2^K objects.
MAX_REPAIR_NODES = 10_000

Mode = Literal["strict", "lenient"]

# Fixed, linear patterns over the caller's text (never a registrant's pattern).
# A JSON object opens with `{` then a key or `}`: other braces (prose, templates) are skipped
# without scanning.
_OBJECT_START = re.compile(r'\{[ \t\r\n]*["}]')
# Outside strings only brackets and quotes matter; inside, only quotes and backslashes.
_STRUCTURAL = re.compile(r'[{}\[\]"]')
_STRING_END = re.compile(r'["\\]')


class ArgumentsUnparseable(ValueError):
    """No JSON object could be taken from the text."""


class Issue(Wire):
    """One finding, located by a JSON pointer into the arguments ("" is the whole object)."""

    path: str
    message: str


class ValidationReport(Wire):
    valid: bool
    arguments: dict[str, Any] | None
    errors: list[Issue] = []
    warnings: list[Issue] = []


# --- Extraction --------------------------------------------------------------------------------


def extract_json_object(text: str) -> dict[str, Any]:
    """The first complete top-level JSON object in `text`.

    Prose around it and Markdown code fences (```json ... ```) are skipped: to the scanner they
    are text outside an object. Where a `{` starts something that is not a JSON object (prose
    like "use {name}"), the search continues at the next `{`.
    """
    if len(text) > MAX_TEXT_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_TEXT_BYTES:
        raise ArgumentsUnparseable(f"text is longer than {MAX_TEXT_BYTES} bytes")
    budget = SCAN_BUDGET_CHARS
    for candidate, found in enumerate(_OBJECT_START.finditer(text)):
        if candidate >= MAX_CANDIDATES:
            raise ArgumentsUnparseable("no JSON object found within the scanning limit")
        start = found.start()
        end = _matching_brace(text, start)
        if end is None:
            # Unclosed from here; a later `{` may still open a complete object (the `{` here
            # may have been prose, its quotes pairing differently).
            budget -= len(text) - start
        else:
            budget -= end + 1 - start
            try:
                value = msgspec.json.decode(text[start : end + 1])
            except msgspec.DecodeError:
                pass
            else:
                if isinstance(value, dict):
                    return value
        if budget < 0:
            raise ArgumentsUnparseable("no JSON object found within the scanning limit")
    raise ArgumentsUnparseable("no JSON object found in the text")


def _matching_brace(text: str, start: int) -> int | None:
    """Index of the bracket closing the `{` at `start`, or None if it never closes.

    Strings and escapes are respected; mismatched bracket kinds are left for the decoder to
    reject. Nesting deeper than MAX_DEPTH raises.
    """
    depth = 0
    position = start
    while True:
        found = _STRUCTURAL.search(text, position)
        if found is None:
            return None
        char = found.group()
        position = found.end()
        if char == '"':
            string_end = _string_end(text, position)
            if string_end is None:
                return None
            position = string_end
        elif char in "{[":
            depth += 1
            if depth > MAX_DEPTH:
                raise ArgumentsUnparseable(f"JSON nested deeper than {MAX_DEPTH} levels")
        else:
            depth -= 1
            if depth == 0:
                return found.start()


def _string_end(text: str, position: int) -> int | None:
    """Index just past the quote closing the string whose body starts at `position`."""
    while True:
        found = _STRING_END.search(text, position)
        if found is None:
            return None
        if found.group() == '"':
            return found.end()
        position = found.end() + 1  # skip the escaped character


# --- Validation --------------------------------------------------------------------------------


class _RepairTooLarge(Exception):
    """Lenient repair would exceed MAX_REPAIR_NODES or MAX_DEPTH."""


def validate_arguments(schema: dict[str, Any], arguments: dict[str, Any] | str, mode: Mode) -> ValidationReport:
    """Validate tool-call arguments against an input schema (JSON Schema 2020-12).

    Text is parsed with `extract_json_object`. Strict: the arguments as given; any violation
    makes them invalid. Lenient: missing properties with a `default` are filled in and
    properties a schema forbids (`additionalProperties: false`) are dropped, each drop reported
    as a warning; what remains is then validated. `arguments` in the report are the (possibly
    repaired) arguments; the caller's value is never modified. A repair that would produce more
    than MAX_REPAIR_NODES values or nest deeper than MAX_DEPTH is `valid: false`, saying so.
    """
    if isinstance(arguments, str):
        try:
            arguments = extract_json_object(arguments)
        except ArgumentsUnparseable as error:
            return _rejected(str(error))
    if not isinstance(arguments, dict):
        return _rejected("arguments must be a JSON object")
    if _depth_exceeds(arguments, MAX_DEPTH):
        return _rejected(f"arguments nested deeper than {MAX_DEPTH} levels")
    try:
        validator = cached_validator(schema)
    except SchemaRejected as error:
        return _rejected(f"the capability's input schema cannot be used: {error}")

    warnings: list[Issue] = []
    if mode == "lenient":
        arguments = copy.deepcopy(arguments)
        try:
            _Repair(schema, warnings).object(arguments, schema, pointer="", depth=1)
        except _RepairTooLarge as error:
            return _rejected(str(error))

    errors = [issue for error in validator.iter_errors(arguments) for issue in _issues(error)]
    return ValidationReport(valid=not errors, arguments=arguments, errors=errors, warnings=warnings)


async def validate_arguments_bounded(
    schema: dict[str, Any], arguments: dict[str, Any] | str, mode: Mode
) -> ValidationReport:
    """`validate_arguments` in a worker process (registry.core.bounded_work): off the event loop, and
    `valid: false` when it runs past the deadline."""
    try:
        return await run_bounded(validate_arguments, schema, arguments, mode)
    except WorkTimedOut as error:
        return _rejected(f"validation against this schema {error}; it was stopped")
    except WorkFailed as error:
        return _rejected(f"validation against this schema failed: {error}")


def _rejected(message: str) -> ValidationReport:
    """A report for arguments that could not be read, or checked, at all."""
    return ValidationReport(valid=False, arguments=None, errors=[Issue(path="", message=message)])


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Whether containers nest deeper than `limit` (iterative: no recursion on hostile input)."""
    return _depth(value, limit) > limit


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of containers (1 for a scalar or an empty one), counted up to `limit + 1`."""
    deepest = 1
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        current, depth = stack.pop()
        if isinstance(current, dict):
            children: Any = current.values()
        elif isinstance(current, list):
            children = current
        else:
            continue
        for child in children:
            if isinstance(child, (dict, list)):
                deepest = max(deepest, depth + 1)
                if deepest > limit:
                    return deepest
                stack.append((child, depth + 1))
    return deepest


def _size(value: Any, limit: int) -> int:
    """Number of JSON values in `value`, counted up to `limit + 1`."""
    count, stack = 0, [value]
    while stack and count <= limit:
        current = stack.pop()
        count += 1
        if isinstance(current, dict):
            stack.extend(current.values())
        elif isinstance(current, list):
            stack.extend(current)
    return count


class _Repair:
    """Lenient repairs, in place, on an object and the objects nested in declared properties.

    Bounded: the values added (defaults, counted with everything inside them) total at most
    MAX_REPAIR_NODES, and nothing is added or visited deeper than MAX_DEPTH; past either bound
    `_RepairTooLarge` ends the repair. Recursion therefore stops at MAX_DEPTH levels, and the
    objects visited are at most the input's plus those added.
    """

    def __init__(self, root: dict[str, Any], warnings: list[Issue]) -> None:
        self.root = root
        self.warnings = warnings
        self.produced = 0

    def object(self, instance: dict[str, Any], schema: Any, *, pointer: str, depth: int) -> None:
        schema = _resolved(schema, self.root)
        if not isinstance(schema, dict):
            return
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict) else {}

        if schema.get("additionalProperties") is False:
            patterns = schema.get("patternProperties")
            patterns = [p for p in patterns if isinstance(p, str)] if isinstance(patterns, dict) else []
            for name in list(instance):
                if name not in properties and not any(pattern_matches(p, name) for p in patterns):
                    del instance[name]
                    message = f"unknown property {name!r} dropped"
                    self.warnings.append(Issue(path=f"{pointer}/{escape_token(name)}", message=message))

        for name, declared in properties.items():
            subschema = _resolved(declared, self.root)
            if not isinstance(subschema, dict):
                continue
            at = f"{pointer}/{escape_token(name)}"
            # A `default` beside a `$ref` annotates the property itself and wins over the target's.
            holder = declared if isinstance(declared, dict) and "default" in declared else subschema
            if name not in instance and "default" in holder:
                self._fill(instance, name, holder["default"], at, depth)
            if isinstance(instance.get(name), dict):
                self.object(instance[name], subschema, pointer=at, depth=depth + 1)

    def _fill(self, instance: dict[str, Any], name: str, default: Any, at: str, depth: int) -> None:
        room = MAX_REPAIR_NODES - self.produced
        size = _size(default, room)
        if size > room:
            raise _RepairTooLarge(
                f"lenient repair would add more than {MAX_REPAIR_NODES} JSON values (defaults filled in, "
                f"reached at {at}); send the arguments explicitly or use strict mode"
            )
        if depth + _depth(default, MAX_DEPTH) > MAX_DEPTH:
            raise _RepairTooLarge(
                f"lenient repair would nest the arguments deeper than {MAX_DEPTH} levels (at {at}); "
                "send the arguments explicitly or use strict mode"
            )
        self.produced += size
        instance[name] = copy.deepcopy(default)


def _resolved(schema: Any, root: dict[str, Any]) -> Any:
    """Follow local `$ref`s ("#/$defs/..."); remote or unresolvable references are left alone
    (the repair then skips that subschema and validation reports what is wrong)."""
    for _ in range(MAX_DEPTH):  # a reference chain longer than this is a cycle
        if not isinstance(schema, dict) or not isinstance(schema.get("$ref"), str):
            return schema
        ref = schema["$ref"]
        if not ref.startswith("#"):
            return schema
        target: Any = root
        for token in (t for t in ref[1:].split("/") if t):
            token = unescape_token(token)
            if isinstance(target, list) and token.isdigit() and int(token) < len(target):
                target = target[int(token)]
            elif isinstance(target, dict) and token in target:
                target = target[token]
            else:
                return schema
        schema = target
    return schema


def _issues(error: jsonschema_rs.ValidationError) -> list[Issue]:
    """One or more issues for a validator error, pointing at the offending property.

    A missing required property and an unexpected property are reported at that property's
    pointer rather than at the enclosing object, so that clients can show them in place.
    """
    pointer = "".join(f"/{escape_token(str(token))}" for token in error.instance_path)
    kind = error.kind
    if isinstance(kind, jsonschema_rs.ValidationErrorKind.Required):
        return [Issue(path=f"{pointer}/{escape_token(str(kind.property))}", message=error.message)]
    if isinstance(kind, jsonschema_rs.ValidationErrorKind.AdditionalProperties):
        return [
            Issue(path=f"{pointer}/{escape_token(name)}", message=f"property {name!r} is not allowed")
            for name in kind.unexpected
        ]
    return [Issue(path=pointer, message=error.message)]


__all__ = [
    "ArgumentsUnparseable",
    "Issue",
    "MAX_DEPTH",
    "MAX_REPAIR_NODES",
    "Mode",
    "ValidationReport",
    "extract_json_object",
    "validate_arguments",
    "validate_arguments_bounded",
]
