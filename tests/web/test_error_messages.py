"""Errors say what happened and what to do next (issue 37): token failures in the caller's terms, with
RFC 6750's error_description; body decoding failures with the allowed values and where; versions
with the form expected. Never a decoder's own words."""

from __future__ import annotations

import time

from tests.auth.test_tokens import claims, forged_tokens
from tests.conftest import count_rows, example

DECODER_WORDS = ("codec", "Signature has expired", "Input data was truncated", "Invalid enum value")


async def put_agent(client, tenant: str, headers: dict, **kwargs):
    return await client.put(f"/v1/agents/{tenant}/billing-agent", headers=headers, **kwargs)


def assert_plain(detail: str) -> None:
    assert not any(words in detail for words in DECODER_WORDS), detail


async def test_token_failures_say_what_happened_and_what_to_do(client, registry, tenant):
    expired_at = int(time.time()) - 60
    tokens = forged_tokens(registry, tenant)
    tokens["expired"] = registry.keyring.sign(claims(tenant, iat=expired_at - 100, exp=expired_at), typ="at+jwt")
    tokens["one part"] = "notajwt"
    expected = {
        "garbage": "the bearer token is not a JWT (three base64url parts separated by dots): get one with capreg token mint",
        "one part": "the bearer token is not a JWT",
        "expired": f"the token expired at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(expired_at))}: request a new one",
        "right kid, wrong key": "the token's signature does not verify against its issuer's keys",
        "other audience": "the token is not meant for capreg",
        "unknown kid": "the token's signing key (kid 'nope') is not among its issuer's published keys",
        "other issuer": "the token's issuer 'https://evil.example' is not one capreg trusts",
        "missing jti": "the token lacks the required claim 'jti'",
    }
    for label, start in expected.items():
        token = tokens[label]
        answer = await client.get("/v1/capabilities", headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 401, (label, answer.text)
        body = answer.json()
        assert body["code"] == "invalid_token", label
        assert body["detail"].startswith(start), (label, body["detail"])
        assert_plain(body["detail"])
        challenge = answer.headers["www-authenticate"]
        assert challenge.startswith('Bearer error="invalid_token", error_description="'), challenge
        assert start.replace('"', "") in challenge, (label, challenge)


async def test_body_failures_say_what_happened(client, mint, db, tenant):
    headers = {**mint(tenant, "billing-agent", "registry:publish"), "Content-Type": "application/json"}
    card = example("billing-agent.json")

    empty = await put_agent(client, tenant, headers, content=b"")
    assert empty.status_code == 400, empty.text
    assert empty.json()["detail"] == "the request needs a JSON body"
    assert empty.json()["errors"][0]["message"].startswith("the body is empty: send a JSON document")

    truncated = await put_agent(client, tenant, headers, content=b'{"name": "billing')
    assert truncated.status_code == 400, truncated.text
    assert truncated.json()["detail"] == "the request body is not valid JSON"
    assert truncated.json()["errors"][0]["message"] == "the body is not valid JSON: it ends before the document does"

    malformed = await put_agent(client, tenant, headers, content=b'{"name": x}')
    assert malformed.status_code == 400, malformed.text
    message = malformed.json()["errors"][0]["message"]
    assert message.startswith("the body is not valid JSON (") and message.endswith("at byte 9)"), message

    card["skills"][0]["sideEffect"] = "explosive"
    enum = await put_agent(client, tenant, headers, json=card)
    assert enum.status_code == 400, enum.text
    (item,) = enum.json()["errors"]
    assert item == {
        "path": "/skills/0/sideEffect",
        "message": "'explosive' is not one of: 'destructive', 'idempotent', 'none', 'write'",
    }

    card = example("billing-agent.json")
    card["visibility"] = "everyone"
    enum = await put_agent(client, tenant, headers, json=card)
    assert enum.json()["errors"][0]["message"] == "'everyone' is not one of: 'public', 'tenant'"

    card = example("billing-agent.json")
    card["skills"][0]["version"] = "v3.0.0"
    version = await put_agent(client, tenant, headers, json=card)
    assert version.status_code == 400, version.text
    (item,) = version.json()["errors"]
    assert item["path"] == "/skills/0/version"
    assert item["message"] == (
        "'v3.0.0' is not a semantic version: write MAJOR.MINOR.PATCH[-PRE][+BUILD], e.g. 3.0.0"
        " (no leading 'v', no leading zeros, no spaces)"
    )
    for answer in (empty, truncated, malformed, enum, version):
        assert_plain(answer.text)
    assert await count_rows(db, "agents", tenant=tenant) == 0  # a rejected request changes nothing
