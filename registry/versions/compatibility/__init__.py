"""Compatibility of two versions of a capability (skill): the changes that break existing callers.

The package holds one concept per module: `breaking_change` (the finding every rule returns), `fields`
(the skill-field rules), `json_values` (JSON equality and kinds the schema comparison reads), `schemas`
(schema subsumption), `verdict` (`check_compatibility`, and the one verdict on publishing a version).
This module holds no code: import from the module that owns the name.

Owns the compatibility rules of docs/api.md#compatibility: `check_compatibility(old, new)` compares two skills in the
registration's camelCase shape and lists every breaking change; an empty list means compatible. Pure:
no I/O. The same verdict serves publishing (409 `incompatible_change`) and `POST /v1/compatibility`.

Schemas are compared by subsumption. The input schema is contravariant (the new one must accept
every instance the old one accepted); the output schema is covariant (every instance the new one
allows must have been allowed by the old one). Both are the same question, "does the wide schema
accept everything the narrow one accepts?", with wide/narrow = new/old for input and old/new for
output. Each finding has a category; the direction turns it into a kind:

    category               input (new accepts less)          output (new promises less)
    type                   type_narrowed                     type_widened
    enum                   enum_narrowed                     enum_widened
    const                  const_changed                     const_changed
    bound                  bound_tightened                   bound_loosened
    pattern                pattern_added                     pattern_removed
    format                 format_added                      format_removed
    required               required_added                    output_property_optional
    closed property        property_removed                  output_property_added
    additionalProperties   additional_properties_narrowed    additional_properties_widened
    property dropped       -                                 output_property_removed
    anything undecided     undecidable                       undecidable

Skill fields: `scope_added`, `side_effect_raised`, `approval_required`, `data_regions_changed`.

Kinds beyond the list in docs/api.md#compatibility, documented here: `const_changed` (a `const` added or changed),
`bound_loosened`, `pattern_removed`, `format_removed`, `additional_properties_widened` and
`output_property_added` (the output directions of the input kinds). `uniqueItems` turned on is a
`bound_tightened`; a subschema that became `false` is a `type_narrowed` (input) or, in output, one
that was `false` and now allows values is a `type_widened`.

Deliberate rules beyond pure subsumption (docs/api.md#compatibility, or the common practice of schema registries):
- Input: adding an optional property to an object is compatible even when the object is open (old
  callers are assumed not to send properties the old schema did not declare).
- Input: a new required property with a `default` is compatible (lenient validation fills it in).
- Output: removing a declared property is breaking even when the new object is closed.

Supported: `type` (with integer inside number), `enum`, `const`, numeric bounds and `multipleOf`,
string/array/object length bounds, `pattern`, `format`, `uniqueItems`, `properties`, `required`,
`additionalProperties`, `items`, `prefixItems`, boolean schemas, local `$ref` (any `#` JSON pointer,
so `#/$defs/...` and `#/definitions/...`; recursion is assumed compatible when it revisits the same
pair of schemas below an object or array level, and a reference cycle that never reaches a schema
is undecidable), `allOf` (a conjunction), `anyOf`/`oneOf` (every old branch must fit some new
branch for input, every new branch some old branch for output; `oneOf` branches must also be
provably disjoint). Keywords it cannot compare (`not`, `if`/`then`/`else`, `dependentSchemas`,
`dependentRequired`, `propertyNames`, `contains`, a changed `patternProperties`, `unevaluated*`,
`$dynamicRef`, remote or anchor `$ref`) are `undecidable` when the wide side has them and no narrow
subschema has them identically. Constraints only the narrow side has are safe to ignore (ignoring
them can only make the verdict stricter). Identical subschemas (with identical reference targets)
are compatible without further analysis. Unknown keywords and annotations are ignored, as
validators ignore them. `$ref`s resolve against the schema's root (`$id` is not followed).
"""
