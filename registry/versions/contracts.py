"""A skill's contract: what a version publishes and compatibility compares (`skill_content`, and
`skill_contract` for a stored version), and whether a skill is one that can be compared at all (its
version semver 2.0, its schemas acceptable JSON Schema documents). The same rules for
`PUT /v1/agents/...` (registry.agents.registration) and `POST /v1/compatibility`
(registry.versions.service). Pure: no I/O (schemas are compiled by registry.core.schema_guard)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from registry.core.problems import ErrorItem
from registry.core.records import SkillRegistration, approval_required
from registry.core.schema_guard import SchemaRejected, compile_schema
from registry.versions.semver import InvalidVersion, Version

if TYPE_CHECKING:
    from db.capabilities import VersionContractRow


def parse_version(text: str, path: str) -> Version | ErrorItem:
    """`text` as a version, or the error item at `path` saying why it is not one."""
    try:
        return Version.parse(text)
    except InvalidVersion as exc:
        return ErrorItem(path=path, message=str(exc))


def schema_errors(schema: Any, path: str, *, must_be_object: bool) -> list[ErrorItem]:
    """Why `schema` is not an acceptable JSON Schema 2020-12 document (empty when it is).

    Checked and compiled by registry.core.schema_guard, the one place a registrant's schema is compiled:
    nothing it says can make capreg fetch a URL or a file, and its patterns must be linear-time.
    """
    if not isinstance(schema, dict):
        return [ErrorItem(path=path, message="a schema must be a JSON object")]
    try:
        compile_schema(schema)
    except SchemaRejected as rejected:
        return [ErrorItem(path=path + (e.path or ""), message=e.message) for e in rejected.errors]
    if must_be_object and schema.get("type") != "object":
        return [ErrorItem(path=path + "/type", message='inputSchema must describe an object ("type": "object")')]
    return []


def checked_schemas(schemas: list[tuple[Any, str, bool]]) -> list[ErrorItem]:
    """`schema_errors` for each (schema, path, must_be_object)."""
    return [
        error
        for schema, path, must_be_object in schemas
        for error in schema_errors(schema, path, must_be_object=must_be_object)
    ]


def skill_content(skill: SkillRegistration) -> dict:
    """The published content of a capability version, the thing that must never change."""
    content = msgspec.to_builtins(skill)
    content["requiresApproval"] = approval_required(skill.side_effect, skill.requires_approval)
    if not content["fixtures"]:
        del content["fixtures"]  # versions published before fixtures existed keep their hash
    return content


def skill_contract(row: VersionContractRow) -> dict[str, Any]:
    """A stored version in the camelCase shape `registry.versions.compatibility.verdict.check_compatibility` reads."""
    return {
        "inputSchema": row.input_schema,
        "outputSchema": row.output_schema,
        "scopes": list(row.scopes),
        "sideEffect": row.side_effect,
        "requiresApproval": row.requires_approval,
        "dataRegions": list(row.data_regions),
    }
