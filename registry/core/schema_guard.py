"""The one way capreg turns a registrant's JSON Schema into a validator, and the checks before it.

A registrant's schema is hostile input: it must never make capreg fetch anything (a `$schema`, a
remote `$ref` or an `$id` naming a URL would make the compiler retrieve it) and its regular
expressions must never backtrack. `schema_problems` walks the schema iteratively, within a depth
and size bound, and refuses:

- a `$schema` other than the JSON Schema 2020-12 URI, anywhere (subschemas and `$defs` too);
- a `$ref`, `$dynamicRef` or `$recursiveRef` that is not local (`#...`);
- an `$id` with a URI scheme (`https:`, `file:`, `urn:` ...) or a network-path (`//host`).

`compile_schema` then meta-validates and compiles with a retriever that refuses every URI (so an
input these checks did not foresee still cannot fetch anything, over the network or from files)
and with jsonschema-rs's linear-time `regex` engine rather than its default backtracking one
(`pattern`s with backreferences or look-around are refused). Every compilation and
meta-validation of a registrant's schema in capreg goes through `compile_schema`; see
docs/security.md.

Pure: no I/O. Compilation is CPU work: callers on the event loop run it through
`registry.core.bounded_work`.
"""

from __future__ import annotations

from typing import Any

import jsonschema_rs
import msgspec

from registry.core.cache_budget import ByteBoundedMemo
from registry.core.json_pointer import escape_token
from registry.core.problems import ErrorItem

SCHEMA_2020_12 = "https://json-schema.org/draft/2020-12/schema"
_ACCEPTED_SCHEMA_URIS = {SCHEMA_2020_12, SCHEMA_2020_12 + "#"}
MAX_SCHEMA_DEPTH = 64
MAX_SCHEMA_NODES = 100_000
# How deep a JSON value checked against a registrant's schema may nest (tool-call arguments,
# fixtures, replay outputs): one bound, so a value any check accepts every other check can walk.
MAX_VALUE_DEPTH = 64

# Keywords whose value is a map of name -> subschema, and keywords whose value is data (never a
# schema, so a `$ref` key inside them is just data). Every other keyword's value is walked as a
# possible schema: unknown keywords included, since a compiler could still look inside them.
_SCHEMA_MAPS = frozenset({"$defs", "definitions", "properties", "patternProperties", "dependentSchemas"})
_DATA = frozenset({"const", "enum", "default", "examples"})
_REFERENCES = ("$ref", "$dynamicRef", "$recursiveRef")

_SCHEMA, _MAP, _VALUE = 0, 1, 2


class SchemaRejected(ValueError):
    """The schema was refused; `errors` locate why (paths relative to the schema's root)."""

    def __init__(self, errors: list[ErrorItem]) -> None:
        super().__init__("; ".join(f"{e.path or '/'}: {e.message}" for e in errors))
        self.errors = errors

    def __reduce__(self):  # picklable across registry.core.bounded_work's process boundary
        return (SchemaRejected, (self.errors,))


def _has_scheme(uri: str) -> bool:
    """Whether `uri` starts with an RFC 3986 scheme (`ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) ":"`).

    Plain string operations: a registrant's string is never run through a regex engine here.
    """
    scheme, colon, _ = uri.partition(":")
    return (
        bool(colon)
        and bool(scheme)
        and scheme[0].isascii()
        and scheme[0].isalpha()
        and all(c.isascii() and (c.isalnum() or c in "+-.") for c in scheme)
    )


def schema_problems(schema: Any, path: str = "") -> list[ErrorItem]:
    """Why `schema` could make capreg do I/O or unbounded work (empty when it cannot).

    Iterative (a hostile schema must not hit the recursion limit), at most MAX_SCHEMA_NODES nodes
    visited and MAX_SCHEMA_DEPTH levels. Paths are JSON pointers prefixed with `path`.
    """
    problems: list[ErrorItem] = []
    stack: list[tuple[Any, str, int, int]] = [(schema, path, 1, _SCHEMA)]
    nodes = 0
    while stack:
        node, pointer, depth, role = stack.pop()
        nodes += 1
        if nodes > MAX_SCHEMA_NODES:
            return [ErrorItem(path=path, message=f"schema has more than {MAX_SCHEMA_NODES} JSON values")]
        if depth > MAX_SCHEMA_DEPTH:
            return [ErrorItem(path=pointer, message=f"schema nests deeper than {MAX_SCHEMA_DEPTH} levels")]
        if isinstance(node, dict):
            if role == _SCHEMA:
                problems += _keyword_problems(node, pointer)
            for key, child in node.items():
                at = f"{pointer}/{escape_token(key)}"
                if role == _SCHEMA and key in _SCHEMA_MAPS and isinstance(child, dict):
                    child_role = _MAP
                elif role == _VALUE or (role == _SCHEMA and key in _DATA):
                    child_role = _VALUE
                else:
                    child_role = _SCHEMA
                stack.append((child, at, depth + 1, child_role))
        elif isinstance(node, list):
            # Items of a list in a schema position are schemas (allOf, prefixItems ...), or
            # strings and numbers that carry no keywords (required, type).
            stack.extend(
                (child, f"{pointer}/{i}", depth + 1, _VALUE if role == _VALUE else _SCHEMA)
                for i, child in enumerate(node)
            )
    return problems


def _keyword_problems(schema: dict[str, Any], pointer: str) -> list[ErrorItem]:
    found: list[ErrorItem] = []
    declared = schema.get("$schema")
    if isinstance(declared, str) and declared not in _ACCEPTED_SCHEMA_URIS:
        found.append(
            ErrorItem(
                path=f"{pointer}/$schema",
                message=f"only JSON Schema 2020-12 ({SCHEMA_2020_12}) is accepted; capreg never fetches a $schema",
            )
        )
    for keyword in _REFERENCES:
        reference = schema.get(keyword)
        if isinstance(reference, str) and not reference.startswith("#"):
            found.append(
                ErrorItem(
                    path=f"{pointer}/{escape_token(keyword)}",
                    message=f"only local references (#...) are allowed; capreg never fetches {reference[:200]!r}",
                )
            )
    identifier = schema.get("$id")
    if isinstance(identifier, str) and (_has_scheme(identifier) or identifier.startswith("//")):
        found.append(
            ErrorItem(
                path=f"{pointer}/$id",
                message="an $id may not name a URI scheme or a host; use a relative $id or $anchor",
            )
        )
    return found


def _refuse_retrieval(uri: str) -> Any:
    """jsonschema-rs retriever: nothing is ever fetched, whatever the URI (http, file, urn ...)."""
    raise PermissionError(f"capreg does not retrieve schemas ({uri[:200]})")


def _regex_hint(message: str) -> str:
    if 'is not a "regex"' in message:
        return (
            message
            + " (capreg runs patterns in a linear-time engine: no backreferences or look-around, and a bounded compiled size)"
        )
    return message


def compile_schema(schema: Any) -> jsonschema_rs.Draft202012Validator:
    """A draft 2020-12 validator for a registrant's schema, or SchemaRejected.

    `format` is asserted: capreg treats a new `format` as a breaking change, so it must bind.
    """
    if not isinstance(schema, (dict, bool)):
        raise SchemaRejected([ErrorItem(path="", message="a schema must be a JSON object")])
    problems = schema_problems(schema)
    if problems:
        raise SchemaRejected(problems)
    try:
        if isinstance(schema, dict):
            jsonschema_rs.meta.validate({**schema, "$schema": SCHEMA_2020_12})
        return jsonschema_rs.Draft202012Validator(
            schema,
            validate_formats=True,
            retriever=_refuse_retrieval,
            pattern_options=jsonschema_rs.RegexOptions(),
        )
    except jsonschema_rs.ValidationError as exc:
        pointer = "".join(f"/{escape_token(str(p))}" for p in exc.instance_path)
        raise SchemaRejected(
            [ErrorItem(path=pointer, message=f"not a valid JSON Schema 2020-12: {_regex_hint(exc.message)}")]
        ) from None
    except Exception as exc:  # ReferencingError, ValueError: an uncompilable schema
        raise SchemaRejected([ErrorItem(path="", message=f"schema cannot be compiled: {str(exc)[:500]}")]) from None


def canonical_schema(schema: Any) -> str:
    """A schema's canonical JSON text (sorted keys): equal schemas, equal cache keys."""
    return msgspec.json.encode(schema, order="sorted").decode()


# The caches below are bounded in bytes as well as entries: a registrant choosing many large
# schemas or patterns must not grow a worker's memory by their size times the entry count. Larger
# ones are compiled on each use (that work is bounded, registry.core.bounded_work) and never kept; the
# rest share a part of CAPREG_CACHE_BUDGET (registry.core.cache_budget), charged 8 bytes per character.
_CACHED_SCHEMA_MAX_CHARS = 64 * 1024
_CACHED_PATTERN_MAX_CHARS = 1024
_DEFAULT_SCHEMA_CACHE_BYTES = 8 * 1024 * 1024


def cached_validator(schema: Any) -> jsonschema_rs.Draft202012Validator:
    """`compile_schema`, once per distinct schema of up to 64 KiB (SchemaRejected is raised again
    each time), within the schema caches' byte budget."""
    canonical = canonical_schema(schema)
    if len(canonical) > _CACHED_SCHEMA_MAX_CHARS:
        return compile_schema(schema)
    return _compiled(canonical)


def _compile_canonical(canonical: str) -> jsonschema_rs.Draft202012Validator:
    return compile_schema(msgspec.json.decode(canonical))


def _compile_pattern(pattern: str) -> jsonschema_rs.Draft202012Validator | None:
    try:
        return compile_schema({"type": "string", "pattern": pattern})
    except SchemaRejected:
        return None


_compiled = ByteBoundedMemo(_compile_canonical, max_bytes=_DEFAULT_SCHEMA_CACHE_BYTES * 3 // 4)
_pattern_validator = ByteBoundedMemo(_compile_pattern, max_bytes=_DEFAULT_SCHEMA_CACHE_BYTES // 4)


def set_schema_cache_budget(max_bytes: int) -> None:
    """The bytes compiled schemas (three quarters) and patterns (a quarter) may hold in this process."""
    _compiled.max_bytes = max_bytes * 3 // 4
    _pattern_validator.max_bytes = max_bytes // 4


def pattern_matches(pattern: str, text: str) -> bool:
    """Whether the ECMA-262-style `pattern` matches somewhere in `text` (unanchored, as JSON Schema's
    `pattern` and `patternProperties`), run by jsonschema-rs's linear-time engine. A pattern that
    engine cannot compile matches nothing."""
    if len(pattern) > _CACHED_PATTERN_MAX_CHARS:
        validator = _pattern_validator.__wrapped__(pattern)
    else:
        validator = _pattern_validator(pattern)
    return validator is not None and validator.is_valid(text)
