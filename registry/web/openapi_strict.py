"""The OpenAPI document as strict as the validation: request and response components from msgspec.

litestar renders a msgspec Struct's schema itself and loses part of what the Struct enforces:
`forbid_unknown_fields` (no `additionalProperties: false`), constraints on list items (the pattern
of each `sharedWith` tenant, the length of each mode) and lower bounds beside a `null` (heartbeat
`load` >= 0). A client generated from such a document sends what the server refuses. msgspec's own
`msgspec.json.schema_components` renders exactly what its decoder checks, so every component that is
one of capreg's Structs is replaced by msgspec's rendering of it (with its nested Structs, under the
same component names). A Struct msgspec cannot render (a field typed `object`) keeps litestar's.

One document: `/schema/openapi.json` serves `document_bytes` of the app's schema, the same function
`capreg openapi` writes to openapi/openapi.json, so what a client downloads and what is committed are
the same bytes (tests/web/test_openapi_served.py).
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request
from litestar.openapi.plugins import JsonRenderPlugin

_OWN_PACKAGES = ("registry", "auth", "db")
_NOT_SERVED = "registry.client"  # the Python client's own result types share names with the server's
_REF_TEMPLATE = "#/components/schemas/{name}"


def _structs() -> dict[str, type[msgspec.Struct]]:
    """capreg's Struct types by class name (the name litestar gives their components)."""
    found: dict[str, list[type]] = {}
    pending = list(msgspec.Struct.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        module = cls.__module__
        if module.split(".")[0] in _OWN_PACKAGES and not (
            module == _NOT_SERVED or module.startswith(_NOT_SERVED + ".")
        ):
            found.setdefault(cls.__name__, [])
            if cls not in found[cls.__name__]:
                found[cls.__name__].append(cls)
    return {name: classes[0] for name, classes in found.items() if len(classes) == 1}  # ambiguous names: left alone


def strict_components(document: dict[str, Any]) -> dict[str, Any]:
    """`document` (an OpenAPI dict) with each of capreg's Struct components rendered by msgspec."""
    components = document.get("components", {}).get("schemas", {})
    structs = _structs()
    renderable = []
    for name in sorted(components):
        cls = structs.get(name)
        if cls is None:
            continue
        try:
            msgspec.json.schema_components([cls], ref_template=_REF_TEMPLATE)
        except TypeError:  # a type msgspec cannot render: litestar's rendering stays
            continue
        renderable.append(cls)
    _, rendered = msgspec.json.schema_components(renderable, ref_template=_REF_TEMPLATE)
    for name, schema in rendered.items():
        if name in components or name in {cls.__name__ for cls in renderable}:
            _keep_formats(components.get(name, {}), schema)
            components[name] = schema
    return document


def _format_of(schema: dict[str, Any]) -> str | None:
    if "format" in schema:
        return schema["format"]
    return next((sub["format"] for key in ("oneOf", "anyOf") for sub in schema.get(key, []) if "format" in sub), None)


def _keep_formats(litestar_schema: dict[str, Any], schema: dict[str, Any]) -> None:
    """msgspec leaves out `format: date-time` on some datetime fields; litestar's rendering has it."""
    for prop, old in litestar_schema.get("properties", {}).items():
        new = schema.get("properties", {}).get(prop)
        if new is None or (found := _format_of(old)) is None or _format_of(new) is not None:
            continue
        for branch in [new, *new.get("anyOf", []), *new.get("oneOf", [])]:
            if branch.get("type") == "string":
                branch["format"] = found


def document_bytes(document: dict[str, Any]) -> bytes:
    """The OpenAPI document as served and committed: strict components, sorted keys, indented."""
    strict = strict_components(msgspec.to_builtins(document))
    return msgspec.json.format(msgspec.json.encode(strict, order="sorted"), indent=2) + b"\n"


class StrictJsonRenderPlugin(JsonRenderPlugin):
    """`/schema/openapi.json`: `document_bytes`, rendered once per process (the routes never change
    after the app is built)."""

    def __init__(self) -> None:
        super().__init__()
        self._rendered: bytes | None = None

    def render(self, request: Request, openapi_schema: dict[str, Any]) -> bytes:
        if self._rendered is None:
            self._rendered = document_bytes(openapi_schema)
        return self._rendered
