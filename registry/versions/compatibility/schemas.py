"""Schema compatibility by subsumption (the rules and their limits: registry.versions.compatibility):
`schema_changes(direction, old, new)` lists the breaking changes from one input or output schema to
another. Pure: no I/O; bounded work (at most _MAX_COMPARISONS subschema comparisons, _MAX_NESTING
levels, _MAX_ALTERNATIVES branches; past a bound the verdict is `undecidable`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from registry.core.json_pointer import escape_token
from registry.versions.compatibility.breaking_change import BreakingChange, Direction
from registry.versions.compatibility.json_values import (
    ALL_KINDS,
    NUMBERS,
    ValueSet,
    is_count,
    is_multiple,
    is_number,
    json_equal,
    references_in,
    resolve_pointer,
    type_kinds,
    type_names,
    value_kind,
)

# A finding before the direction names it: (path, category, message).
_Finding = tuple[str, str, str]

_KINDS: dict[str, tuple[str, str]] = {
    "type": ("type_narrowed", "type_widened"),
    "enum": ("enum_narrowed", "enum_widened"),
    "const": ("const_changed", "const_changed"),
    "bound": ("bound_tightened", "bound_loosened"),
    "pattern": ("pattern_added", "pattern_removed"),
    "format": ("format_added", "format_removed"),
    "required": ("required_added", "output_property_optional"),
    "closed_property": ("property_removed", "output_property_added"),
    "additional_properties": ("additional_properties_narrowed", "additional_properties_widened"),
    "dropped_property": ("property_removed", "output_property_removed"),
    "undecidable": ("undecidable", "undecidable"),
}

# Keyword groups the checker does not analyse: compatible only if some narrow subschema has the
# whole group identically (the first keyword is the one that makes the group apply).
_OPAQUE_GROUPS: tuple[tuple[str, ...], ...] = (
    ("not",),
    ("if", "then", "else"),
    ("dependentSchemas",),
    ("dependentRequired",),
    ("propertyNames",),
    ("contains", "minContains", "maxContains"),
    ("dependencies",),
)
# These depend on everything evaluated around them, so any difference is undecidable.
_CONTEXT_DEPENDENT = ("unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef")

# Keywords that never reject a value; a subschema made only of these accepts everything.
_ANNOTATIONS = frozenset(
    "$schema $id $anchor $dynamicAnchor $comment $defs definitions $vocabulary title description default examples"
    " deprecated readOnly writeOnly contentMediaType contentEncoding contentSchema".split()
)

_MAX_COMPARISONS = 20_000
_MAX_NESTING = 96
_MAX_ALTERNATIVES = 64
_MISSING = object()


def schema_changes(direction: Direction, old: Any, new: Any) -> list[BreakingChange]:
    if json_equal(old, new):
        return []
    base = "/inputSchema" if direction == "input" else "/outputSchema"
    comparison = _SchemaComparison(direction, old, new)
    findings = comparison.covers(comparison.wide_root, [comparison.narrow_root], base, 0)
    side = 0 if direction == "input" else 1
    return [BreakingChange(path, _KINDS[category][side], message) for path, category, message in _unique(findings)]


def _unique(findings: list[_Finding]) -> list[_Finding]:
    # The same keyword can fail once per alternative of the narrow side; report it once.
    seen: set[tuple[str, str]] = set()
    unique = []
    for finding in findings:
        if finding[:2] not in seen:
            seen.add(finding[:2])
            unique.append(finding)
    return unique


class _SchemaComparison:
    """One subsumption check between two schema documents ("wide" must accept what "narrow" does).

    Stateful only for bookkeeping: memoised derived subschemas (so their identities are stable for
    cycle detection), the pairs being compared (for recursion), and a work budget.
    """

    def __init__(self, direction: Direction, old: Any, new: Any) -> None:
        self.direction = direction
        self.wide_root, self.narrow_root = (new, old) if direction == "input" else (old, new)
        self._derived: dict[tuple[int, tuple[str, ...]], dict[str, Any]] = {}
        self._in_progress: dict[tuple[int, tuple[int, ...]], int] = {}
        self._same: dict[tuple[int, int], bool] = {}
        # Findings per pair of expanded schemas. A schema reached at several places (a shared or
        # recursive definition) is then reported once. Only failures are kept: an empty result may
        # rest on a recursion assumption that has not been confirmed yet.
        self._failures: dict[tuple[tuple[int, ...], tuple[int, ...]], list[_Finding]] = {}
        self._budget = _MAX_COMPARISONS
        self._nesting = 0

    # -- wording ------------------------------------------------------------------------------

    def _say(self, input_text: str, output_text: str) -> str:
        return input_text if self.direction == "input" else output_text

    # -- structure ----------------------------------------------------------------------------

    def _without(self, schema: Mapping[str, Any], *keys: str) -> dict[str, Any]:
        cache_key = (id(schema), keys)
        derived = self._derived.get(cache_key)
        if derived is None:
            # Sources live in the documents or in this cache, so their ids are not reused meanwhile.
            derived = {k: v for k, v in schema.items() if k not in keys}
            self._derived[cache_key] = derived
        return derived

    def _flatten(
        self, schemas: Sequence[Any], root: Any, path: str
    ) -> tuple[list[Mapping[str, Any]] | None, list[_Finding]]:
        """The conjunction `schemas` as a list of plain subschemas (references and allOf expanded).

        None means the conjunction accepts nothing (a `false` in it).
        """
        conjuncts: list[Mapping[str, Any]] = []
        findings: list[_Finding] = []
        seen: set[int] = set()
        # Each entry carries the references being expanded above it: meeting one again without
        # passing through any object or array level is a cycle that never reaches a schema.
        pending: list[tuple[Any, frozenset[int]]] = [(s, frozenset()) for s in reversed(schemas)]
        while pending:
            schema, expanding = pending.pop()
            if schema is True:
                continue
            if schema is False:
                return None, findings
            if not isinstance(schema, Mapping):
                findings.append((path, "undecidable", f"{schema!r} is not a schema"))
                continue
            if "$ref" in schema:
                if id(schema) in expanding:
                    findings.append(
                        (path, "undecidable", f"reference {schema['$ref']!r} is a cycle that never reaches a schema")
                    )
                    continue
                target, error = resolve_pointer(root, schema["$ref"])
                if error is not None:
                    findings.append((path, "undecidable", error))
                inner = expanding | {id(schema)}
                pending.append((self._without(schema, "$ref"), inner))
                if error is None:
                    pending.append((target, inner))
                continue
            if "allOf" in schema:
                branches = schema["allOf"]
                if not isinstance(branches, list):
                    findings.append((path, "undecidable", "allOf is not a list"))
                    continue
                pending.append((self._without(schema, "allOf"), expanding))
                pending.extend((branch, expanding) for branch in reversed(branches))
                continue
            if not schema.keys() - _ANNOTATIONS:
                continue  # nothing but annotations and definitions: accepts everything
            if id(schema) not in seen:
                seen.add(id(schema))
                conjuncts.append(schema)
        return conjuncts, findings

    def _alternatives(
        self, conjuncts: list[Mapping[str, Any]], path: str
    ) -> tuple[list[tuple[str, list[Mapping[str, Any]]]], list[_Finding]]:
        """The narrow conjunction split on its anyOf/oneOf into alternatives (a union), each labelled
        with the branch path. oneOf is treated as anyOf: a superset, so the verdict stays safe."""
        done: list[tuple[str, list[Mapping[str, Any]]]] = []
        findings: list[_Finding] = []
        pending: list[tuple[str, list[Mapping[str, Any]]]] = [("", conjuncts)]
        while pending:
            label, conj = pending.pop(0)
            index = next((i for i, c in enumerate(conj) if "anyOf" in c or "oneOf" in c), None)
            if index is None:
                done.append((label, conj))
                continue
            schema = conj[index]
            keyword = "anyOf" if "anyOf" in schema else "oneOf"
            branches = schema[keyword]
            rest = [*conj[:index], self._without(schema, keyword), *conj[index + 1 :]]
            if not isinstance(branches, list):
                findings.append((path, "undecidable", f"{keyword} is not a list"))
                pending.append((label, rest))
                continue
            for number, branch in enumerate(branches):
                flat, flat_findings = self._flatten([branch], self.narrow_root, path)
                findings += flat_findings
                if flat is not None:
                    pending.append((f"{label}/{keyword}/{number}", rest + flat))
            if len(done) + len(pending) > _MAX_ALTERNATIVES:
                return [], [(path, "undecidable", "too many anyOf/oneOf combinations to compare")]
        return done, findings

    def _same_meaning(self, wide: Any, narrow: Any) -> bool:
        """Identical subschemas whose references also reach identical targets."""
        if wide is narrow and self.wide_root is self.narrow_root:
            return True
        cache_key = (id(wide), id(narrow))
        cached = self._same.get(cache_key)
        if cached is None:
            cached = json_equal(wide, narrow) and self._same_targets(wide)
            self._same[cache_key] = cached
        return cached

    def _same_targets(self, schema: Any) -> bool:
        pending, seen = references_in(schema), set()
        while pending:
            ref = pending.pop()
            if ref in seen or not ref.startswith("#"):
                continue  # identical remote references read the same text
            seen.add(ref)
            wide_target, wide_error = resolve_pointer(self.wide_root, ref)
            narrow_target, narrow_error = resolve_pointer(self.narrow_root, ref)
            if (wide_error is None) != (narrow_error is None):
                return False
            if wide_error is None:
                if not json_equal(wide_target, narrow_target):
                    return False
                pending += references_in(wide_target)
        return True

    # -- subsumption --------------------------------------------------------------------------

    def covers(self, wide: Any, narrow: list[Any], path: str, depth: int) -> list[_Finding]:
        """Findings that show `wide` rejects something the conjunction `narrow` accepts.

        `depth` counts object/array levels: revisiting a pair of schemas deeper down is recursion
        through data, and assuming it holds is sound because instances are finite (coinduction).
        """
        if any(self._same_meaning(wide, n) for n in narrow):
            return []
        if self._budget <= 0:
            return [(path, "undecidable", "schemas too large to compare")]
        if self._nesting >= _MAX_NESTING:
            return [(path, "undecidable", "schemas nested too deeply to compare")]
        key = (id(wide), tuple(id(n) for n in narrow))
        entered = self._in_progress.get(key)
        if entered is not None:
            if entered < depth:
                return []
            return [(path, "undecidable", "recursive reference that never reaches a schema")]
        self._budget -= 1
        self._nesting += 1
        self._in_progress[key] = depth
        try:
            return self._covers(wide, narrow, path, depth)
        finally:
            del self._in_progress[key]
            self._nesting -= 1

    def _covers(self, wide: Any, narrow: list[Any], path: str, depth: int) -> list[_Finding]:
        narrow_conj, narrow_findings = self._flatten(narrow, self.narrow_root, path)
        if narrow_conj is None:
            return []  # the narrow side accepts nothing, so anything covers it
        if narrow_findings:
            return narrow_findings  # what the narrow side accepts is unknown: nothing more to say
        wide_conj, findings = self._flatten([wide], self.wide_root, path)
        if wide_conj is None:
            findings.append(
                (
                    path,
                    "type",
                    self._say(
                        "new schema accepts nothing here (false)",
                        "old schema promised nothing here (false); new allows values",
                    ),
                )
            )
            return findings
        expanded = (tuple(map(id, wide_conj)), tuple(map(id, narrow_conj)))
        if expanded in self._failures:
            return self._failures[expanded]
        alternatives, split_findings = self._alternatives(narrow_conj, path)
        findings += split_findings
        for schema in wide_conj:
            if any(self._same_meaning(schema, n) for n in narrow_conj):
                continue
            for keyword in ("anyOf", "oneOf"):
                if keyword in schema:
                    findings += self._branches(schema, keyword, narrow_conj, alternatives, path, depth)
            for _label, alternative in alternatives:
                findings += self._keywords(schema, alternative, path, depth)
        if findings:
            self._failures[expanded] = findings
        return findings

    def _kinds(self, conjuncts: Sequence[Mapping[str, Any]]) -> frozenset[str]:
        kinds = ALL_KINDS
        for schema in conjuncts:
            if "type" in schema and (declared := type_kinds(schema["type"])) is not None:
                kinds &= declared
            if "const" in schema:
                kinds &= {value_kind(schema["const"])}
            if isinstance(schema.get("enum"), list):
                kinds &= {value_kind(v) for v in schema["enum"]}
        return kinds

    def _branch_kinds(self, branch: Any, root: Any) -> frozenset[str]:
        flat, _ = self._flatten([branch], root, "")
        if flat is None:
            return frozenset()
        if any("anyOf" in s or "oneOf" in s for s in flat):
            return ALL_KINDS  # nested unions: do not guess
        return self._kinds(flat)

    @staticmethod
    def _finite_values(conjuncts: Sequence[Mapping[str, Any]], kinds: frozenset[str]) -> list[Any] | None:
        """All values the conjunction can take, when `enum`/`const` (or its types) make them finite."""
        sets = [[s["const"]] for s in conjuncts if "const" in s]
        sets += [s["enum"] for s in conjuncts if isinstance(s.get("enum"), list)]
        if sets:
            others = [ValueSet(values) for values in sets[1:]]
            values = [v for v in sets[0] if all(v in other for other in others)]
        elif kinds <= {"null", "boolean"}:
            values = ([None] if "null" in kinds else []) + ([True, False] if "boolean" in kinds else [])
        else:
            return None
        return [v for v in values if value_kind(v) in kinds]

    def _branches(
        self,
        schema: Mapping[str, Any],
        keyword: str,
        narrow: list[Mapping[str, Any]],
        alternatives: list[tuple[str, list[Mapping[str, Any]]]],
        path: str,
        depth: int,
    ) -> list[_Finding]:
        branches = schema[keyword]
        if not isinstance(branches, list):
            return [(path, "undecidable", f"{keyword} is not a list")]
        if any(keyword in n and self._same_meaning(branches, n[keyword]) for n in narrow):
            return []
        findings: list[_Finding] = []
        union_kinds = frozenset().union(*(self._branch_kinds(b, self.wide_root) for b in branches))
        for label, alternative in alternatives:
            at = path + label
            covering = next(
                (i for i, b in enumerate(branches) if not self.covers(b, alternative, f"{path}/{keyword}/{i}", depth)),
                None,
            )
            if covering is None:
                lost = self._kinds(alternative) - union_kinds
                if lost:
                    findings.append(
                        (
                            at,
                            "type",
                            self._say(
                                f"old accepted {type_names(lost)} here; no {keyword} branch of the new schema does",
                                f"new may return {type_names(lost)} here; no old {keyword} branch allowed it",
                            ),
                        )
                    )
                else:
                    findings.append(
                        (
                            at,
                            "undecidable",
                            self._say(
                                f"cannot show that one new {keyword} branch accepts all the old schema accepted here",
                                f"cannot show that all the new schema allows here fits one old {keyword} branch",
                            ),
                        )
                    )
                continue
            # oneOf also needs every other branch to reject these values (else they match two).
            if keyword == "oneOf" and not all(
                self._disjoint(b, alternative) for i, b in enumerate(branches) if i != covering
            ):
                findings.append((at, "undecidable", "cannot show that values here match exactly one oneOf branch"))
        return findings

    def _disjoint(self, branch: Any, narrow: list[Mapping[str, Any]]) -> bool:
        """Provably no value satisfies both `branch` (wide side) and `narrow`."""
        flat, _ = self._flatten([branch], self.wide_root, "")
        if flat is None:
            return True
        narrow_kinds = self._kinds(narrow)
        shared_kinds = self._branch_kinds(branch, self.wide_root) & narrow_kinds
        if not shared_kinds:
            return True
        branch_values = self._finite_values(flat, ALL_KINDS)
        narrow_values = self._finite_values(narrow, narrow_kinds)
        if branch_values is not None and narrow_values is not None:
            members = ValueSet(branch_values)
            if not any(v in members for v in narrow_values):
                return True
        # A discriminator: a property the branch requires, whose allowed values the narrow side
        # never uses (a value missing there fails the branch's `required`). Only objects have
        # properties, so this needs both sides to share no other kind of value.
        if shared_kinds != {"object"}:
            return False
        for schema in flat:
            properties = schema.get("properties")
            required = schema.get("required")
            if not isinstance(properties, Mapping) or not isinstance(required, list):
                continue
            for name in required:
                if not isinstance(name, str) or not isinstance(properties.get(name), Mapping):
                    continue
                branch_values = self._finite_values([properties[name]], ALL_KINDS)
                declared = [
                    n["properties"][name]
                    for n in narrow
                    if isinstance(n.get("properties"), Mapping) and name in n["properties"]
                ]
                flat_narrow, _ = self._flatten(declared, self.narrow_root, "")
                if flat_narrow is None or branch_values is None:
                    continue
                narrow_values = self._finite_values(flat_narrow, self._kinds(flat_narrow))
                if narrow_values is not None:
                    members = ValueSet(branch_values)
                    if not any(v in members for v in narrow_values):
                        return True
        return False

    # -- keywords of one wide subschema against one narrow alternative ------------------------

    def _keywords(
        self, wide: Mapping[str, Any], narrow: list[Mapping[str, Any]], path: str, depth: int
    ) -> list[_Finding]:
        kinds = self._kinds(narrow)
        if not kinds:
            return []  # the narrow side accepts no value at all
        values = self._finite_values(narrow, kinds)
        findings: list[_Finding] = []
        findings += self._type(wide, kinds, path)
        findings += self._enum_and_const(wide, values, path)
        if kinds & NUMBERS:
            findings += self._numbers(wide, narrow, kinds, values, path)
        if "string" in kinds:
            findings += self._strings(wide, narrow, values, path)
        if "array" in kinds:
            findings += self._arrays(wide, narrow, path, depth)
        if "object" in kinds:
            findings += self._objects(wide, narrow, path, depth)
        findings += self._opaque(wide, narrow, path)
        return findings

    def _type(self, wide: Mapping[str, Any], kinds: frozenset[str], path: str) -> list[_Finding]:
        if "type" not in wide:
            return []
        wide_kinds = type_kinds(wide["type"])
        if wide_kinds is None:
            return [(path + "/type", "undecidable", f"type {wide['type']!r} is not a JSON Schema type")]
        lost = kinds - wide_kinds
        if not lost:
            return []
        return [
            (
                path + "/type",
                "type",
                self._say(
                    f"type narrowed: old accepted {type_names(kinds)}, new accepts only {type_names(wide_kinds)}",
                    f"type widened: old promised {type_names(wide_kinds)}, new may return {type_names(kinds)}",
                ),
            )
        ]

    def _enum_and_const(self, wide: Mapping[str, Any], values: list[Any] | None, path: str) -> list[_Finding]:
        findings: list[_Finding] = []
        if "enum" in wide:
            allowed = wide["enum"]
            if not isinstance(allowed, list):
                findings.append((path + "/enum", "undecidable", "enum is not a list"))
            elif values is None:
                findings.append(
                    (
                        path + "/enum",
                        "enum",
                        self._say(
                            f"values are now restricted to {allowed!r}; before they were not",
                            f"values were restricted to {allowed!r}; now they are not",
                        ),
                    )
                )
            else:
                members = ValueSet(allowed)
                if missing := [v for v in values if v not in members]:
                    findings.append(
                        (
                            path + "/enum",
                            "enum",
                            self._say(
                                f"enum no longer accepts {missing!r}", f"enum widened: new may return {missing!r}"
                            ),
                        )
                    )
        if "const" in wide:
            expected = wide["const"]
            if values is None or any(not json_equal(v, expected) for v in values):
                findings.append(
                    (
                        path + "/const",
                        "const",
                        self._say(
                            f"new schema only accepts the constant {expected!r}",
                            f"old schema promised the constant {expected!r}; new does not",
                        ),
                    )
                )
        return findings

    def _bound(self, path: str, keyword: str, wide_value: Any, narrow_text: str) -> _Finding:
        return (
            f"{path}/{keyword}",
            "bound",
            self._say(
                f"{keyword} tightened to {wide_value!r} (old: {narrow_text})",
                f"{keyword} loosened: old promised {wide_value!r}, new: {narrow_text}",
            ),
        )

    def _numbers(
        self,
        wide: Mapping[str, Any],
        narrow: list[Mapping[str, Any]],
        kinds: frozenset[str],
        values: list[Any] | None,
        path: str,
    ) -> list[_Finding]:
        findings: list[_Finding] = []
        numbers = None if values is None else [v for v in values if is_number(v)]
        integers_only = (kinds & NUMBERS) == {"integer"}
        lower = _tightest(narrow, "minimum", "exclusiveMinimum", max)
        upper = _tightest(narrow, "maximum", "exclusiveMaximum", min)
        for keyword in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
            if keyword not in wide:
                continue
            bound = wide[keyword]
            if not is_number(bound):
                findings.append((f"{path}/{keyword}", "undecidable", f"{keyword} {bound!r} is not a number"))
                continue
            exclusive = keyword.startswith("exclusive")
            is_lower = keyword.endswith("inimum")
            if numbers is not None and all(_within(v, bound, exclusive, is_lower) for v in numbers):
                continue
            implied = (
                _lower_implied(lower, bound, exclusive, integers_only)
                if is_lower
                else _upper_implied(upper, bound, exclusive, integers_only)
            )
            if not implied:
                narrow_bound = lower if is_lower else upper
                findings.append(self._bound(path, keyword, bound, _describe_bound(narrow_bound, is_lower)))
        if "multipleOf" in wide:
            divisor = wide["multipleOf"]
            if not is_number(divisor) or divisor <= 0:
                findings.append(
                    (f"{path}/multipleOf", "undecidable", f"multipleOf {divisor!r} is not a positive number")
                )
            elif not (
                (numbers is not None and all(is_multiple(v, divisor) for v in numbers))
                or any(
                    is_number(n.get("multipleOf")) and n["multipleOf"] > 0 and is_multiple(n["multipleOf"], divisor)
                    for n in narrow
                )
                or (integers_only and is_multiple(1, divisor))
            ):
                old = [n["multipleOf"] for n in narrow if "multipleOf" in n]
                findings.append(
                    self._bound(path, "multipleOf", divisor, f"multipleOf {old[0]!r}" if old else "no multipleOf")
                )
        return findings

    def _counts(
        self,
        wide: Mapping[str, Any],
        narrow: list[Mapping[str, Any]],
        path: str,
        low_keyword: str,
        high_keyword: str,
        sizes: list[int] | None = None,
        narrow_low: int = 0,
        narrow_high: int | None = None,
    ) -> list[_Finding]:
        """minLength/maxLength, minItems/maxItems, minProperties/maxProperties."""
        findings: list[_Finding] = []
        low = max([narrow_low] + [int(n[low_keyword]) for n in narrow if is_count(n.get(low_keyword))])
        highs = [int(n[high_keyword]) for n in narrow if is_count(n.get(high_keyword))]
        if narrow_high is not None:
            highs.append(narrow_high)
        high = min(highs) if highs else None
        if low_keyword in wide:
            bound = wide[low_keyword]
            if not is_count(bound):
                findings.append((f"{path}/{low_keyword}", "undecidable", f"{low_keyword} {bound!r} is not a count"))
            elif bound > low and not (sizes is not None and all(s >= bound for s in sizes)):
                findings.append(self._bound(path, low_keyword, bound, f"{low_keyword} {low}"))
        if high_keyword in wide:
            bound = wide[high_keyword]
            if not is_count(bound):
                findings.append((f"{path}/{high_keyword}", "undecidable", f"{high_keyword} {bound!r} is not a count"))
            elif (high is None or high > bound) and not (sizes is not None and all(s <= bound for s in sizes)):
                findings.append(
                    self._bound(path, high_keyword, bound, "no limit" if high is None else f"{high_keyword} {high}")
                )
        return findings

    def _strings(
        self, wide: Mapping[str, Any], narrow: list[Mapping[str, Any]], values: list[Any] | None, path: str
    ) -> list[_Finding]:
        sizes = None if values is None else [len(v) for v in values if isinstance(v, str)]
        findings = self._counts(wide, narrow, path, "minLength", "maxLength", sizes)
        for keyword, category in (("pattern", "pattern"), ("format", "format")):
            if keyword not in wide or any(n.get(keyword) == wide[keyword] for n in narrow):
                continue
            before = [n[keyword] for n in narrow if keyword in n]
            findings.append(
                (
                    f"{path}/{keyword}",
                    category,
                    self._say(
                        f"new {keyword} {wide[keyword]!r} " + (f"replaces {before[0]!r}" if before else "was added"),
                        f"old {keyword} {wide[keyword]!r} "
                        + (f"was replaced by {before[0]!r}" if before else "was removed"),
                    ),
                )
            )
        return findings

    def _arrays(
        self, wide: Mapping[str, Any], narrow: list[Mapping[str, Any]], path: str, depth: int
    ) -> list[_Finding]:
        # A closed tuple (prefixItems with items: false) bounds the length too.
        closed_lengths = [
            len(n["prefixItems"]) for n in narrow if n.get("items") is False and isinstance(n.get("prefixItems"), list)
        ]
        findings = self._counts(
            wide, narrow, path, "minItems", "maxItems", narrow_high=min(closed_lengths) if closed_lengths else None
        )
        highs = [int(n["maxItems"]) for n in narrow if is_count(n.get("maxItems"))] + closed_lengths
        max_items = min(highs) if highs else None
        if wide.get("uniqueItems") is True and not (
            any(n.get("uniqueItems") is True for n in narrow) or (max_items is not None and max_items <= 1)
        ):
            findings.append(
                (
                    path + "/uniqueItems",
                    "bound",
                    self._say(
                        "items must now be unique; before duplicates were accepted",
                        "items were promised unique; now duplicates may appear",
                    ),
                )
            )
        wide_prefix = wide.get("prefixItems", [])
        wide_items = wide.get("items", True)
        if not isinstance(wide_prefix, list) or isinstance(wide_items, list):
            return [*findings, (path + "/items", "undecidable", "array items in a form this checker does not compare")]
        if not wide_prefix and wide_items is True:
            return findings
        prefixes = [n["prefixItems"] if isinstance(n.get("prefixItems"), list) else [] for n in narrow]
        longest = max([len(wide_prefix)] + [len(p) for p in prefixes])
        for index in range(longest):
            if max_items is not None and index >= max_items:
                return findings
            if index < len(wide_prefix):
                wide_item, at = wide_prefix[index], f"{path}/prefixItems/{index}"
            else:
                wide_item, at = wide_items, f"{path}/items"
            narrow_item = [
                p[index] if index < len(p) else n["items"]
                for n, p in zip(narrow, prefixes, strict=True)
                if index < len(p) or "items" in n
            ]
            findings += self.covers(wide_item, narrow_item, at, depth + 1)
        if max_items is None or max_items > longest:
            narrow_rest = [n["items"] for n in narrow if "items" in n]
            findings += self.covers(wide_items, narrow_rest, f"{path}/items", depth + 1)
        return findings

    def _objects(
        self, wide: Mapping[str, Any], narrow: list[Mapping[str, Any]], path: str, depth: int
    ) -> list[_Finding]:
        findings: list[_Finding] = []
        wide_properties = wide.get("properties", {})
        wide_required = wide.get("required", [])
        wide_additional = wide.get("additionalProperties", True)
        if not isinstance(wide_properties, Mapping) or not isinstance(wide_required, list):
            return [(path, "undecidable", "properties/required in a form this checker does not compare")]
        wide_patterns = wide.get("patternProperties") or {}
        patterned = [n for n in narrow if n.get("patternProperties")]
        if wide_patterns and not any(json_equal(wide_patterns, n["patternProperties"]) for n in patterned):
            findings.append(
                (
                    path + "/patternProperties",
                    "undecidable",
                    "patternProperties changed; the checker cannot compare them",
                )
            )

        def declared(schema: Mapping[str, Any]) -> Mapping[str, Any]:
            properties = schema.get("properties")
            return properties if isinstance(properties, Mapping) else {}

        def constraint_on(name: str) -> tuple[list[Any], bool]:
            """What the narrow side says about property `name`, and whether it declares it."""
            schemas = [declared(n)[name] for n in narrow if name in declared(n)]
            is_declared = bool(schemas)
            # additionalProperties covers the name only where no patternProperties might match it.
            schemas += [
                n["additionalProperties"]
                for n in narrow
                if name not in declared(n) and "additionalProperties" in n and not n.get("patternProperties")
            ]
            return schemas, is_declared

        dropped: set[str] = set()
        for name, schema in wide_properties.items():
            narrow_schemas, is_declared = constraint_on(name)
            if not is_declared:
                if self.direction == "output" and schema is not False:
                    dropped.add(name)
                    findings.append(
                        (
                            f"{path}/properties/{escape_token(name)}",
                            "dropped_property",
                            f"output property {name!r} was removed",
                        )
                    )
                    continue
                if not narrow_schemas and not patterned:
                    continue  # input: a new optional property (see the module docstring)
            findings += self.covers(schema, narrow_schemas, f"{path}/properties/{escape_token(name)}", depth + 1)

        narrow_required = {
            r for n in narrow if isinstance(n.get("required"), list) for r in n["required"] if isinstance(r, str)
        }
        for name in wide_required:
            if not isinstance(name, str) or name in narrow_required or name in dropped:
                continue
            property_schema = wide_properties.get(name)
            if self.direction == "input" and isinstance(property_schema, Mapping) and "default" in property_schema:
                continue  # a default fills it in (docs/api.md#compatibility: "a new required property without a default")
            findings.append(
                (
                    f"{path}/properties/{escape_token(name)}",
                    "required",
                    self._say(
                        f"property {name!r} is now required and has no default",
                        f"property {name!r} is no longer always present",
                    ),
                )
            )

        if wide_additional is not True and wide_additional != {}:
            findings += self._additional(wide, wide_additional, wide_patterns, narrow, path, depth)

        closed_count = None
        closed = [n for n in narrow if n.get("additionalProperties") is False and not n.get("patternProperties")]
        if closed:
            closed_count = min(len(declared(n)) for n in closed)
        findings += self._counts(
            wide,
            narrow,
            path,
            "minProperties",
            "maxProperties",
            narrow_low=len(narrow_required),
            narrow_high=closed_count,
        )
        return findings

    def _additional(
        self,
        wide: Mapping[str, Any],
        wide_additional: Any,
        wide_patterns: Mapping[str, Any],
        narrow: list[Mapping[str, Any]],
        path: str,
        depth: int,
    ) -> list[_Finding]:
        findings: list[_Finding] = []
        wide_properties = wide.get("properties", {})
        narrow_names = dict.fromkeys(
            name
            for n in narrow
            if isinstance(n.get("properties"), Mapping)
            for name in n["properties"]
            if name not in wide_properties
        )
        for name in narrow_names:
            schemas = [
                n["properties"][name]
                for n in narrow
                if isinstance(n.get("properties"), Mapping) and name in n["properties"]
            ]
            at = f"{path}/properties/{escape_token(name)}"
            sub = self.covers(wide_additional, schemas, at, depth + 1)
            if not sub:
                continue
            if self.direction == "input":
                findings.append(
                    (at, "closed_property", f"property {name!r} was accepted and the new schema no longer accepts it")
                )
            elif wide_additional is False:
                findings.append(
                    (
                        at,
                        "closed_property",
                        f"output property {name!r} appears where the old output allowed no other properties",
                    )
                )
            else:
                findings += sub
        # Names neither side declares: the narrow side's additionalProperties (where they apply to
        # every undeclared name, i.e. no patternProperties or the same ones as the wide side).
        others = [
            n["additionalProperties"]
            for n in narrow
            if "additionalProperties" in n
            and (not n.get("patternProperties") or json_equal(n["patternProperties"], wide_patterns))
        ]
        if any(o is False for o in others):
            return findings
        at = path + "/additionalProperties"
        if not others or all(o is True or o == {} for o in others):
            findings.append(
                (
                    at,
                    "additional_properties",
                    self._say(
                        "the object no longer accepts every additional property"
                        if wide_additional is False
                        else "additional properties are now restricted",
                        "the output object may now contain additional properties"
                        if wide_additional is False
                        else "additional properties are no longer restricted",
                    ),
                )
            )
            return findings
        sub = self.covers(wide_additional, others, at, depth + 1)
        if sub and wide_additional is False:
            findings.append(
                (
                    at,
                    "additional_properties",
                    self._say(
                        "the object no longer accepts additional properties",
                        "the output object may now contain additional properties",
                    ),
                )
            )
        else:
            findings += sub
        return findings

    def _opaque(self, wide: Mapping[str, Any], narrow: list[Mapping[str, Any]], path: str) -> list[_Finding]:
        findings: list[_Finding] = []
        for group in _OPAQUE_GROUPS:
            if group[0] not in wide:
                continue
            if any(all(self._same_meaning(wide.get(k, _MISSING), n.get(k, _MISSING)) for k in group) for n in narrow):
                continue
            findings.append(
                (f"{path}/{group[0]}", "undecidable", f"{'/'.join(group)} differs; the checker cannot compare it")
            )
        for keyword in _CONTEXT_DEPENDENT:
            if keyword in wide and wide[keyword] is not True:
                findings.append(
                    (f"{path}/{keyword}", "undecidable", f"{keyword} in a changed schema cannot be compared")
                )
        return findings


def _tightest(narrow: list[Mapping[str, Any]], inclusive: str, exclusive: str, pick: Any) -> tuple[float, bool] | None:
    """The narrow side's tightest bound of one direction as (value, exclusive)."""
    bounds = [(n[inclusive], False) for n in narrow if is_number(n.get(inclusive))]
    bounds += [(n[exclusive], True) for n in narrow if is_number(n.get(exclusive))]
    if not bounds:
        return None
    best = pick(value for value, _ in bounds)
    # At equal values the exclusive bound is the tighter one.
    return best, any(value == best and is_exclusive for value, is_exclusive in bounds)


def _describe_bound(bound: tuple[float, bool] | None, is_lower: bool) -> str:
    if bound is None:
        return "no limit"
    value, exclusive = bound
    return f"{'>' if is_lower else '<'}{'' if exclusive else '='} {value!r}"


def _within(value: float, bound: float, exclusive: bool, is_lower: bool) -> bool:
    if is_lower:
        return value > bound if exclusive else value >= bound
    return value < bound if exclusive else value <= bound


def _lower_implied(narrow: tuple[float, bool] | None, bound: float, exclusive: bool, integers_only: bool) -> bool:
    """Does the narrow lower bound guarantee `value >(=) bound`?"""
    if narrow is None:
        return False
    value, narrow_exclusive = narrow
    if integers_only:  # compare as inclusive integer bounds: "> 0" is ">= 1" for integers
        value, narrow_exclusive = (math.floor(value) + 1 if narrow_exclusive else math.ceil(value)), False
        bound, exclusive = (math.floor(bound) + 1 if exclusive else math.ceil(bound)), False
    return value > bound or (value == bound and (narrow_exclusive or not exclusive))


def _upper_implied(narrow: tuple[float, bool] | None, bound: float, exclusive: bool, integers_only: bool) -> bool:
    """Does the narrow upper bound guarantee `value <(=) bound`?"""
    if narrow is None:
        return False
    value, narrow_exclusive = narrow
    if integers_only:
        value, narrow_exclusive = (math.ceil(value) - 1 if narrow_exclusive else math.floor(value)), False
        bound, exclusive = (math.ceil(bound) - 1 if exclusive else math.floor(bound)), False
    return value < bound or (value == bound and (narrow_exclusive or not exclusive))
