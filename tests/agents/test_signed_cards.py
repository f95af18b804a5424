"""Signed cards (docs/api.md#signed-cards): the registry's signature on every card it serves, checked
with a2a-sdk's own verifier fed from the JWKS, as a router would; rotation; the canonical form."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from a2a.types import AgentCard
from a2a.utils.signing import InvalidSignaturesError, _canonicalize_agent_card, create_signature_verifier
from google.protobuf.json_format import ParseDict
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from jwt import PyJWK

from registry.agents.card_signing import MAX_CARD_DEPTH, CardNotCanonical, canonical_card, without_empty_values
from registry.config import registry_url
from registry.core.signing_keys import rotate_key
from tests.conftest import example


def verifier_from(jwks: dict, seen: list | None = None):
    """a2a-sdk's verifier with a key provider reading the registry's JWKS (by kid)."""
    keys = {key["kid"]: key for key in jwks["keys"]}

    def key_provider(kid, jku):
        if seen is not None:
            seen.append((kid, jku))
        return PyJWK(keys[kid])

    return create_signature_verifier(key_provider, ["EdDSA"])


def verify(card_bytes: bytes, jwks: dict, seen: list | None = None) -> None:
    verifier_from(jwks, seen)(ParseDict(json.loads(card_bytes), AgentCard(), ignore_unknown_fields=True))


@pytest.fixture
async def billing(client, mint, tenant):
    publish = mint(tenant, "publisher", "registry:publish")
    response = await client.put(
        f"/v1/agents/{tenant}/billing-agent", json=example("billing-agent.json"), headers=publish
    )
    assert response.status_code == 201, response.text
    return tenant


async def test_public_card_verifies_with_a2a_sdk_and_a_byte_change_fails(client, billing, settings):
    jwks = (await client.get("/.well-known/jwks.json")).json()
    response = await client.get(f"/v1/agents/{billing}/billing-agent/.well-known/agent-card.json")
    assert response.status_code == 200
    card = response.json()
    assert len(card["signatures"]) == 1
    seen: list = []
    verify(response.content, jwks, seen)
    kid, jku = seen[0]
    assert kid in {key["kid"] for key in jwks["keys"]}
    assert jku == f"{registry_url(settings)}/.well-known/jwks.json"
    header = json.loads(_b64decode(card["signatures"][0]["protected"]))
    assert header["alg"] == "EdDSA" and header["kid"] == kid
    # One byte changed anywhere in what is signed: the signature no longer verifies.
    changed = response.content.replace(b"Billing Agent", b"Billing Agenu", 1)
    assert changed != response.content
    with pytest.raises(InvalidSignaturesError):
        verify(changed, jwks)


async def test_extended_card_verifies_with_a2a_sdk(client, mint, billing):
    jwks = (await client.get("/.well-known/jwks.json")).json()
    reader = mint(billing, "router", "registry:read invoice:read", regions=["eu"])
    response = await client.get(f"/v1/agents/{billing}/billing-agent/extendedAgentCard", headers=reader)
    assert response.status_code == 200, response.text
    assert response.json()["skills"], "the caller passes the skill's checks"
    verify(response.content, jwks)
    # A caller who passes nothing gets the withheld card, signed too.
    nobody = mint(billing, "nobody", "")
    withheld = await client.get(f"/v1/agents/{billing}/billing-agent/extendedAgentCard", headers=nobody)
    verify(withheld.content, jwks)
    tampered = json.loads(response.content)
    tampered["capabilities"]["extensions"][-1]["params"]["skills"]["invoice.lookup"]["scopes"] = []
    with pytest.raises(InvalidSignaturesError):
        verify(json.dumps(tampered).encode(), jwks)


async def test_cards_signed_before_a_rotation_verify_while_the_key_is_published(client, registry, db, billing):
    before = await client.get(f"/v1/agents/{billing}/billing-agent/.well-known/agent-card.json")
    old_kid = json.loads(_b64decode(before.json()["signatures"][0]["protected"]))["kid"]
    async with db.acquire() as conn:
        await rotate_key(conn, timedelta(hours=1))
    await registry.refresh_keyring(force=True)
    registry.responses.clear()
    jwks = (await client.get("/.well-known/jwks.json")).json()
    assert old_kid in {key["kid"] for key in jwks["keys"]}
    verify(before.content, jwks)  # signed by the old key, still published
    after = await client.get(f"/v1/agents/{billing}/billing-agent/.well-known/agent-card.json")
    new_kid = json.loads(_b64decode(after.json()["signatures"][0]["protected"]))["kid"]
    assert new_kid != old_kid and new_kid == registry.keyring.signing_kid
    verify(after.content, jwks)
    # Once the old key is gone from the JWKS, what it signed no longer verifies.
    without_old = {"keys": [key for key in jwks["keys"] if key["kid"] != old_kid]}
    with pytest.raises(Exception):  # noqa: B017 (a2a-sdk's verifier raises its own types)
        verify(before.content, without_old)


async def test_the_cached_public_card_follows_a_key_removal(client, registry, db, billing):
    """After `capreg keys rotate --keep-seconds 0` the public card is signed by a key the JWKS holds
    at once: the cached card signed by the removed key was served until the cache entry expired."""
    url = f"/v1/agents/{billing}/billing-agent/.well-known/agent-card.json"
    before = await client.get(url)
    async with db.acquire() as conn:
        await rotate_key(conn, timedelta(0))
    await registry.refresh_keyring(force=True)  # what every replica's key watcher does
    jwks = (await client.get("/.well-known/jwks.json")).json()
    old_kid = json.loads(_b64decode(before.json()["signatures"][0]["protected"]))["kid"]
    assert old_kid not in {key["kid"] for key in jwks["keys"]}
    verify((await client.get(url)).content, jwks)


async def test_a_card_version_is_signed_once(client, registry, billing):
    url = f"/v1/agents/{billing}/billing-agent/.well-known/agent-card.json"
    signed = registry.card_signatures.signed  # the registration signed its new card already
    first = await client.get(url)
    assert registry.card_signatures.signed == signed
    registry.responses.clear()  # the card is rebuilt: its signature is not computed again
    second = await client.get(url)
    assert second.content == first.content
    assert registry.card_signatures.signed == signed


async def test_the_cached_card_does_not_depend_on_the_host_header_of_another_request(client, billing):
    url = f"/v1/agents/{billing}/billing-agent/.well-known/agent-card.json"
    ours = await client.get(url)
    await client.get(url, headers={"Host": "evil.example"})
    again = await client.get(url)
    assert again.content == ours.content


def _b64decode(text: str) -> bytes:
    import base64

    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


# The canonical form is the SDK's, byte for byte, whatever the card holds.
_json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53) + 1, 2**53 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
_json = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@hypothesis_settings(max_examples=60, deadline=None)
@given(
    name=st.text(min_size=1, max_size=30),
    params=st.dictionaries(st.text(max_size=8), _json, max_size=4),
    tags=st.lists(st.text(max_size=10), max_size=3),
)
def test_canonical_card_is_the_sdks(name, params, tags):
    card = {
        "name": name,
        "description": "d",
        "version": "1.0.0",
        "supportedInterfaces": [
            {"url": "https://r.example/a", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}
        ],
        "capabilities": {"extensions": [{"uri": "https://x.example/ext", "params": params}]},
        "defaultInputModes": ["application/json"],
        "defaultOutputModes": ["application/json"],
        "skills": [{"id": "s", "name": "S", "description": "", "tags": tags}],
    }
    assert canonical_card(card) == _canonicalize_agent_card(ParseDict(card, AgentCard())).encode()


# capreg builds the canonical form from public pieces (rfc8785 and its own empty-value rule); the
# oracle here is a2a-sdk's private `_canonicalize_agent_card`, imported by this test only, so an
# upstream change of the form turns this red instead of making served signatures fail to verify.
# The values where the two could part: empties at every level, JCS number forms at the edges of
# ECMAScript's exponent window, and keys whose UTF-16 order differs from their code-point order.
@pytest.mark.parametrize(
    "params",
    [
        {"empty": "", "nothing": None, "no_list": [], "no_object": {}, "kept": [False, 0, 0.0, "x"]},
        {"nested": {"a": [[], {}, None, ""], "b": {"c": {"d": ""}}}},
        {"numbers": [1e21, 1e20, 1e-7, 1e-6, -0.0, 5e-324, 1.7976931348623157e308, 123456789.125, -2.5e-10]},
        {"\U0001f600": 1, "\uffff": 2, "a": 3, "\u00e9": 4, "": 5},
        {"escapes": '\u0000\u001f"\\\u007f\u2028 é 😀'},
    ],
    ids=["empties", "nested-empties", "numbers", "utf16-key-order", "escapes"],
)
def test_canonical_card_is_the_sdks_at_the_edges(params):
    card = {
        "name": "n",
        "description": "",
        "version": "1.0.0",
        "supportedInterfaces": [
            {"url": "https://r.example/a", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}
        ],
        "capabilities": {"extensions": [{"uri": "https://x.example/ext", "params": params}]},
        "skills": [{"id": "s", "name": "S", "description": "", "tags": ["", "t"]}],
    }
    assert canonical_card(card) == _canonicalize_agent_card(ParseDict(card, AgentCard())).encode()


def test_a_card_nested_past_the_verifiers_depth_has_no_canonical_form():
    deep: dict = {}
    for _ in range(MAX_CARD_DEPTH + 5):
        deep = {"d": deep or {"leaf": 1}}
    card = {"name": "n", "version": "1", "capabilities": {"extensions": [{"uri": "u", "params": deep}]}}
    with pytest.raises(CardNotCanonical):
        canonical_card(card)
    # The empty-value pass refuses on its own too (protobuf's parser may refuse first above).
    with pytest.raises(CardNotCanonical):
        without_empty_values(deep)


async def test_client_agent_card_verifies_and_refuses_a_changed_card(client, billing):
    from registry.client import AsyncRegistry, CapregError

    registry = AsyncRegistry("http://registry.test", http=client)
    card = await registry.agent_card(f"{billing}/billing-agent")
    assert card["name"] and card["signatures"]
    assert (await registry.agent_card(f"{billing}/billing-agent/invoice.lookup@latest"))["name"] == card["name"]

    # A cache (or anyone in between) that changed the card: the client refuses it.
    class Tampering:
        def __init__(self, inner):
            self.inner = inner

        async def request(self, *args, **kwargs):
            response = await self.inner.request(*args, **kwargs)
            if response.url.path.endswith("agent-card.json"):
                import httpx

                return httpx.Response(
                    200, content=response.content.replace(b"Billing Agent", b"Billing Agenu"), request=response.request
                )
            return response

    tampered = AsyncRegistry("http://registry.test", http=Tampering(client))
    with pytest.raises(CapregError) as raised:
        await tampered.agent_card(f"{billing}/billing-agent")
    assert raised.value.code == "invalid_signature"
    unchecked = await tampered.agent_card(f"{billing}/billing-agent", verify=False)
    assert unchecked["name"] == "Billing Agenu"
