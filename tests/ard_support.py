"""Validating ARD answers against ARD's own JSON Schema and OpenAPI with jsonschema-rs, formats
checked, nothing ever fetched.

ARD's files are not copied into this repository (the project commits no other project's files). They
are read from a checkout of ards-project/ard-spec named by `ARD_SPEC` (its `spec/schemas/` and
`conformance/bin/conformance-test`); `.ci/run` exports one (`ARD_SPEC`, else `../shared/ard-spec`), pinned to `ARD_SPEC_COMMIT`, and sets
`CAPREG_REQUIRE_ARD_SPEC=1`, so there a missing checkout fails the run. Without one, answers are
still checked by the tests' own assertions, the schema checks are skipped and
`test_ard_spec_checkout_is_present` says so."""

from __future__ import annotations

import copy
import json
import os
from functools import cache
from pathlib import Path

import jsonschema_rs
import pytest
import yaml

# The ard-spec commit capreg was last checked against (ARD v0.9); .ci/run extracts this one.
ARD_SPEC_COMMIT = "5fa2f5aef790b478319f6a3b43adf4661b0ed0e0"
CHECKOUT = Path(os.environ["ARD_SPEC"]) if os.environ.get("ARD_SPEC") else None
REQUIRED = os.environ.get("CAPREG_REQUIRE_ARD_SPEC") == "1"
SCHEMAS = CHECKOUT / "spec" / "schemas" if CHECKOUT else None
TOOL = CHECKOUT / "conformance" / "bin" / "conformance-test" if CHECKOUT else None
MISSING = (
    "ARD's specification is not on this machine: set ARD_SPEC to a checkout of ards-project/ard-spec "
    f"(commit {ARD_SPEC_COMMIT[:7]})"
)


def spec_available() -> bool:
    """Whether ARD's schemas and tool are here; a missing checkout fails when CI requires it."""
    present = SCHEMAS is not None and (SCHEMAS / "ard.openapi.yaml").is_file() and TOOL is not None and TOOL.is_file()
    if not present and REQUIRED:
        pytest.fail(f"{MISSING} (CAPREG_REQUIRE_ARD_SPEC=1)")
    return present


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
    catalog = json.loads((SCHEMAS / "ai-catalog.schema.json").read_text())
    openapi = yaml.safe_load((SCHEMAS / "ard.openapi.yaml").read_text())
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
    """The instance against ARD's named definition (a no-op without ARD's checkout: see the module)."""
    if not spec_available():
        return
    errors = [f"{'/'.join(map(str, e.instance_path))}: {e.message}" for e in validator(name).iter_errors(instance)]
    assert not errors, f"{name}: {errors}"
