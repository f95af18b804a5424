"""Tool-call arguments: tolerant extraction of a JSON object from model output, and validation
against a capability's input schema (strict, or lenient with defaults and unknown-property
removal). Owns the compiled-validator cache. Pure functions: no I/O.

Work is bounded: text over 1 MiB, nesting deeper than 64 and pathological inputs are rejected
with `ArgumentsUnparseable` or a validation error, never with RecursionError or unbounded time.
"""

from __future__ import annotations

import copy
import functools
import re
from typing import Any, Literal

import jsonschema_rs
import msgspec

from registry.wire import Wire

MAX_TEXT_BYTES = 1024 * 1024
MAX_DEPTH = 64
# Scanning restarts at each `{` that did not start an object; without caps, hostile text (many
# unclosed or invalid candidates) would cost time quadratic in its length.
SCAN_BUDGET_CHARS = 2 * MAX_TEXT_BYTES
MAX_CANDIDATES = 1000

Mode = Literal["strict", "lenient"]

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
            position = _string_end(text, position)
            if position is None:
                return None
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


def validate_arguments(
    schema: dict[str, Any], arguments: dict[str, Any] | str, mode: Mode
) -> ValidationReport:
    """Validate tool-call arguments against an input schema (JSON Schema 2020-12).

    Text is parsed with `extract_json_object`. Strict: the arguments as given; any violation
    makes them invalid. Lenient: missing properties with a `default` are filled in and
    properties a schema forbids (`additionalProperties: false`) are dropped, each drop reported
    as a warning; what remains is then validated. `arguments` in the report are the (possibly
    repaired) arguments; the caller's value is never modified.
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

    warnings: list[Issue] = []
    if mode == "lenient":
        arguments = copy.deepcopy(arguments)
        _repair(arguments, schema, root=schema, pointer="", warnings=warnings)

    errors = [
        issue
        for error in compiled_validator(schema).iter_errors(arguments)
        for issue in _issues(error)
    ]
    return ValidationReport(valid=not errors, arguments=arguments, errors=errors, warnings=warnings)


def _rejected(message: str) -> ValidationReport:
    """A report for arguments that could not be read at all."""
    return ValidationReport(valid=False, arguments=None, errors=[Issue(path="", message=message)])


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Whether containers nest deeper than `limit` (iterative: no recursion on hostile input)."""
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
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


def _repair(
    instance: dict[str, Any],
    schema: Any,
    *,
    root: dict[str, Any],
    pointer: str,
    warnings: list[Issue],
) -> None:
    """Lenient repairs, in place, on an object and the objects nested in declared properties.

    Recursion follows the instance, whose depth is already bounded.
    """
    schema = _resolved(schema, root)
    if not isinstance(schema, dict):
        return
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}

    if schema.get("additionalProperties") is False:
        patterns = [
            re.compile(p) for p in schema.get("patternProperties", {}) if _is_python_regex(p)
        ]
        for name in list(instance):
            if name not in properties and not any(p.search(name) for p in patterns):
                del instance[name]
                message = f"unknown property {name!r} dropped"
                warnings.append(Issue(path=f"{pointer}/{_escape(name)}", message=message))

    for name, subschema in properties.items():
        subschema = _resolved(subschema, root)
        if not isinstance(subschema, dict):
            continue
        if name not in instance and "default" in subschema:
            instance[name] = copy.deepcopy(subschema["default"])
        if isinstance(instance.get(name), dict):
            nested_pointer = f"{pointer}/{_escape(name)}"
            _repair(instance[name], subschema, root=root, pointer=nested_pointer, warnings=warnings)


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
            token = token.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or token not in target:
                return schema
            target = target[token]
        schema = target
    return schema


def _is_python_regex(pattern: str) -> bool:
    try:
        re.compile(pattern)
    except re.error:
        return False
    return True


def _issues(error: jsonschema_rs.ValidationError) -> list[Issue]:
    """One or more issues for a validator error, pointing at the offending property.

    A missing required property and an unexpected property are reported at that property's
    pointer rather than at the enclosing object, so that clients can show them in place.
    """
    pointer = "".join(f"/{_escape(str(token))}" for token in error.instance_path)
    kind = error.kind
    if isinstance(kind, jsonschema_rs.ValidationErrorKind.Required):
        return [Issue(path=f"{pointer}/{_escape(str(kind.property))}", message=error.message)]
    if isinstance(kind, jsonschema_rs.ValidationErrorKind.AdditionalProperties):
        return [
            Issue(path=f"{pointer}/{_escape(name)}", message=f"property {name!r} is not allowed")
            for name in kind.unexpected
        ]
    return [Issue(path=pointer, message=error.message)]


def _escape(token: str) -> str:
    """A JSON pointer reference token (RFC 6901)."""
    return token.replace("~", "~0").replace("/", "~1")


# --- Compiled validators -----------------------------------------------------------------------


def compiled_validator(schema: dict[str, Any]) -> jsonschema_rs.Draft202012Validator:
    """The draft 2020-12 validator for `schema`, compiled once per distinct schema.

    `format` is asserted: capreg treats a new `format` as a breaking change, so it must bind.
    """
    return _compiled(canonical_schema(schema))


def canonical_schema(schema: dict[str, Any]) -> str:
    """A schema's canonical JSON text (sorted keys): equal schemas, equal cache keys."""
    return msgspec.json.encode(schema, order="sorted").decode()


@functools.lru_cache(maxsize=1024)
def _compiled(canonical: str) -> jsonschema_rs.Draft202012Validator:
    return jsonschema_rs.Draft202012Validator(msgspec.json.decode(canonical), validate_formats=True)
