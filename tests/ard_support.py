"""Validating ARD answers against ARD's own JSON Schema and OpenAPI (tests/ard_spec/, unmodified
copies of the specification's files) with jsonschema-rs, formats checked, nothing ever fetched."""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path

import jsonschema_rs
import yaml

SPEC = Path(__file__).parent / "ard_spec"


def _rewrite_refs(node):
    """OpenAPI component and cross-file references as references into one document's $defs."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                value = value.replace("#/components/schemas/", "#/$defs/").replace(
                    "./ai-catalog.schema.json#/$defs/", "#/$defs/"
                )
            out[key] = _rewrite_refs(value)
        return out
    if isinstance(node, list):
        return [_rewrite_refs(v) for v in node]
    return node


@cache
def _definitions() -> dict:
    catalog = json.loads((SPEC / "ai-catalog.schema.json").read_text())
    openapi = yaml.safe_load((SPEC / "ard.openapi.yaml").read_text())
    defs = copy.deepcopy(catalog["$defs"])
    manifest = {k: v for k, v in catalog.items() if k not in ("$schema", "$id", "$defs")}
    defs["AICatalogManifest"] = manifest
    for name, schema in openapi["components"]["schemas"].items():
        defs[name] = _rewrite_refs(schema)
    return defs


def _refuse(uri: str):
    raise ValueError(f"no retrieval in tests: {uri}")


@cache
def validator(name: str):
    """A validator of the named definition: `AICatalogManifest`, `catalogEntry`, or a component of
    ARD's OpenAPI (`SearchResponse`, `ListResponse`, `ExploreResponse`, `Error`, `SearchRequest`, ...)."""
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$ref": f"#/$defs/{name}",
        "$defs": _definitions(),
    }
    return jsonschema_rs.Draft202012Validator(schema, validate_formats=True, retriever=_refuse)


def assert_valid(name: str, instance) -> None:
    errors = [f"{'/'.join(map(str, e.instance_path))}: {e.message}" for e in validator(name).iter_errors(instance)]
    assert not errors, f"{name}: {errors}"
