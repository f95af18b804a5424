"""Caller token verification: every malformed, forged or misdirected token is 401 invalid_token."""

from __future__ import annotations

import base64
import time
import uuid

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.conftest import count_rows, example


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def claims(for_tenant: str, **overrides) -> dict:
    now = int(time.time())
    base = {
        "iss": "capreg",
        "sub": "mallory",
        "aud": "capreg",
        "iat": now,
        "exp": now + 600,
        "jti": str(uuid.uuid4()),
        "tenant": for_tenant,
        "scope": "registry:publish registry:read",
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def forged_tokens(registry, tenant: str) -> dict[str, str]:
    keyring = registry.keyring
    kid = keyring.signing_kid
    public_jwk = next(k for k in keyring.jwks if k["kid"] == kid)
    good = claims(tenant)
    signed = lambda c, **h: keyring.sign(c, typ=h.get("typ", "at+jwt"))  # noqa: E731
    header_none = b64(b'{"alg":"none","typ":"at+jwt","kid":"' + kid.encode() + b'"}')
    return {
        "expired": signed(claims(tenant, iat=int(time.time()) - 100, exp=int(time.time()) - 60)),
        "alg none": f"{header_none}.{b64(jwt.api_jws.json.dumps(good).encode())}.",
        "HS256 with the public key": jwt.encode(
            good, public_jwk["x"].encode(), algorithm="HS256", headers={"kid": kid, "typ": "at+jwt"}
        ),
        "other audience": signed(claims(tenant, aud="someone-else")),
        "other issuer": signed(claims(tenant, iss="https://evil.example")),
        "missing jti": signed(claims(tenant, jti=None)),
        "missing tenant": signed(claims(tenant, tenant=None)),
        "missing exp": signed(claims(tenant, exp=None)),
        "unknown kid": jwt.encode(
            good, Ed25519PrivateKey.generate(), algorithm="EdDSA", headers={"kid": "nope", "typ": "at+jwt"}
        ),
        "path-shaped kid": jwt.encode(
            good, Ed25519PrivateKey.generate(), algorithm="EdDSA", headers={"kid": "../../etc/passwd", "typ": "at+jwt"}
        ),
        "right kid, wrong key": jwt.encode(
            good, Ed25519PrivateKey.generate(), algorithm="EdDSA", headers={"kid": kid, "typ": "at+jwt"}
        ),
        "ticket type": signed(good, typ="capreg-ticket+jwt"),
        "no typ": jwt.encode(good, keyring._signing_key, algorithm="EdDSA", headers={"kid": kid}),
        "garbage": "abc.def.ghi",
    }


async def test_forged_and_invalid_tokens_are_401_and_change_nothing(client, registry, db, tenant):
    for label, token in forged_tokens(registry, tenant).items():
        response = await client.put(
            f"/v1/agents/{tenant}/billing-agent",
            json=example("billing-agent.json"),
            headers={"Authorization": f"Bearer {token}"},
        )
        assert response.status_code == 401, (label, response.text)
        assert response.json()["code"] == "invalid_token", label
        assert response.headers["www-authenticate"].startswith("Bearer"), label
        # Anonymous endpoints reject a bad token too: never silently anonymous.
        discovery = await client.get("/v1/capabilities", headers={"Authorization": f"Bearer {token}"})
        assert discovery.status_code == 401, label
    assert await count_rows(db, "agents", tenant=tenant) == 0


async def test_non_bearer_authorization_is_401(client):
    response = await client.get("/v1/capabilities", headers={"Authorization": "Basic dXNlcjpwYXNz"})
    assert response.status_code == 401


async def test_jwks_publishes_the_signing_key_and_tokens_verify_offline(client, mint, tenant):
    jwks = (await client.get("/.well-known/jwks.json")).json()
    token = mint(tenant, "router", "registry:read")["Authorization"].split()[1]
    kid = jwt.get_unverified_header(token)["kid"]
    jwk = next(k for k in jwks["keys"] if k["kid"] == kid)
    assert "d" not in jwk and jwk["kty"] == "OKP" and jwk["crv"] == "Ed25519"
    decoded = jwt.decode(token, jwt.PyJWK(jwk).key, algorithms=["EdDSA"], audience="capreg", issuer="capreg")
    assert decoded["tenant"] == tenant and decoded["scope"] == "registry:read"
