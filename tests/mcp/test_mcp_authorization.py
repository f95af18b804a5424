"""MCP authorization (issue 37): a presented bad token on /mcp is HTTP 401 whose challenge points at the
RFC 9728 protected-resource metadata, and that metadata says where tokens come from."""

from __future__ import annotations

from registry.config import registry_url
from tests.mcp_support import post, rpc


async def test_a_bad_token_is_401_naming_the_resource_metadata(client, settings):
    metadata_url = registry_url(settings) + "/.well-known/oauth-protected-resource"
    for token in ("forged", "abc.def.ghi"):
        answer = await post(client, rpc("tools/list"), {"Authorization": f"Bearer {token}"})
        assert answer.status_code == 401, answer.text
        assert answer.json()["code"] == "invalid_token"
        assert answer.json()["detail"].startswith("the bearer token is not a JWT")
        challenge = answer.headers["www-authenticate"]
        assert challenge.startswith('Bearer error="invalid_token", error_description="the bearer token is not a JWT')
        assert challenge.endswith(f', resource_metadata="{metadata_url}"'), challenge
    # Anonymous MCP stays allowed: discovery tools need no token.
    anonymous = await post(client, rpc("tools/list"))
    assert anonymous.status_code == 200, anonymous.text


async def test_protected_resource_metadata(client, settings):
    answer = await client.get("/.well-known/oauth-protected-resource")
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("application/json")
    base = registry_url(settings)
    assert answer.json() == {
        "resource": f"{base}/mcp",
        "authorization_servers": [settings.issuer, *(t.issuer for t in settings.trusted_issuers)],
        "scopes_supported": ["registry:read", "registry:publish", "registry:admin", "audit:read", "registry:attest"],
        "bearer_methods_supported": ["header"],
        "resource_name": "capreg",
        "resource_documentation": f"{base}/schema",
    }
