"""ARD's official conformance tool against a real `capreg serve`: registry mode anonymously and with
a bearer token, and manifest mode. The tool is not on a package index and is not vendored here;
set ARD_CONFORMANCE_TOOL to its path (conformance/bin/conformance-test of ards-project/ard-spec)
to run it. The same checks, against ARD's JSON Schema and OpenAPI, run always in tests/ard/test_ard.py."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx

from auth.tokens import mint_caller_token
from tests.ard_support import assert_valid

TOOL = os.environ.get("ARD_CONFORMANCE_TOOL")


def _conformance(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, timeout=120)


def test_the_tools_probes_pass_against_capreg_serve(live_server, app, settings):
    """What the tool sends, sent to the real server; what it checks, checked against ARD's schemas."""
    base, _, _ = live_server
    keyring = app.state.registry.keyring
    token = mint_caller_token(
        keyring,
        issuer=settings.issuer,
        audience=settings.audience,
        tenant="conformance",
        sub="prober",
        scopes=["registry:read"],
        regions=None,
        ttl=600,
    )
    for headers in ({}, {"Authorization": f"Bearer {token}"}):
        listed = httpx.get(f"{base}/ard/agents", headers=headers, timeout=5)
        assert listed.status_code == 200 and "items" in listed.json()
        assert_valid("ListResponse", listed.json())
        searched = httpx.post(
            f"{base}/ard/search",
            headers=headers,
            timeout=5,
            json={
                "query": {"text": "weather forecast tools", "filter": {"type": ["application/mcp-server-card+json"]}},
                "federation": "none",
                "pageSize": 2,
            },
        )
        assert searched.status_code == 200
        assert_valid("SearchResponse", searched.json())
        explored = httpx.post(
            f"{base}/ard/explore",
            headers=headers,
            timeout=5,
            json={"query": {"text": "weather"}, "resultType": {"facets": [{"field": "type"}]}},
        )
        assert explored.status_code == 200 and explored.json()["resultType"] == "facets"
        assert_valid("ExploreResponse", explored.json())
    manifest = httpx.get(f"{base}/.well-known/ard.json", timeout=5)
    assert manifest.status_code == 200
    assert_valid("AICatalogManifest", manifest.json())
    if TOOL:
        for args in (
            ("registry", f"{base}/ard"),
            ("registry", f"{base}/ard", "--header", f"Authorization: Bearer {token}"),
            ("manifest", f"{base}/.well-known/ard.json"),
        ):
            result = _conformance(*args)
            assert result.returncode == 0 and "CONFORMANCE STATUS: PASS" in result.stdout, result.stdout + result.stderr
            assert "✗" not in result.stdout, result.stdout
