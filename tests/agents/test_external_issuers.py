"""External identity providers (CAPREG_TRUSTED_ISSUERS) end to end: a second app on the same database
trusts an IdP whose JWKS is a file; its tokens work for detail release, and nothing else does. An
issuer speaks only for the tenants it is configured for, its key set is re-read without a restart,
and audit events name it (`actorIssuer`)."""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
import uuid
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from auth.issuers import URL_MAX_SECONDS, URL_MIN_SECONDS, IssuerKeyRefresher, url_refetch_after
from registry.config import Settings, TrustedIssuer, load_settings
from tests.conftest import example, running_app

IDP = "https://idp.example.test/"
IDP_KID = "idp-rsa-1"
BILLING = example("billing-agent.json")


def jwk_of(public_key, kid: str, alg: str) -> dict:
    jwk = json.loads(jwt.algorithms.get_default_algorithms()[alg].to_jwk(public_key))
    return {**jwk, "kid": kid, "alg": alg, "use": "sig"}


class IdentityProvider:
    """An IdP that signs RS256 tokens with one RSA key and publishes it in a JWKS file."""

    def __init__(self, directory: Path):
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.jwks_file = directory / "idp-jwks.json"
        self.jwks_file.write_text(json.dumps({"keys": [jwk_of(self.key.public_key(), IDP_KID, "RS256")]}))

    @staticmethod
    def claims(tenant: str, scope: str, regions: list[str] | None = None, **changes) -> dict:
        now = int(time.time())
        claims = {
            "iss": IDP,
            "sub": "idp-router",
            "aud": "capreg",
            "iat": now,
            "exp": now + 300,
            "jti": str(uuid.uuid4()),
            "tenant": tenant,
            "scope": scope,
        }
        if regions is not None:
            claims["regions"] = regions
        return {**claims, **changes}

    def token(self, claims: dict, *, typ: str | None = "JWT", kid: str = IDP_KID, key=None, alg: str = "RS256") -> str:
        # PyJWT drops a falsy `typ` from the header: that is the "no typ" case.
        return jwt.encode(claims, key or self.key, algorithm=alg, headers={"kid": kid, "typ": typ or ""})


@pytest.fixture(scope="module")
def idp() -> IdentityProvider:
    return IdentityProvider(Path(tempfile.mkdtemp(prefix="capreg-idp-")))


@pytest.fixture(scope="module")
async def idp_client(database_url, idp):
    """A second capreg on the same database that also trusts the IdP (its JWKS from a file)."""
    settings = Settings(
        database_url=database_url,
        home=Path(tempfile.mkdtemp(prefix="capreg-home-")),
        trusted_issuers=[TrustedIssuer(issuer=IDP, tenants=["*"], jwks_file=str(idp.jwks_file))],
    )
    async with running_app(settings) as (_, client):
        yield client


@pytest.fixture
async def billing(client, mint, tenant) -> str:
    response = await client.put(
        f"/v1/agents/{tenant}/billing-agent",
        json={**BILLING, "visibility": "tenant"},
        headers=mint(tenant, "publisher", "registry:publish"),
    )
    assert response.status_code == 201, response.text
    return f"/v1/agents/{tenant}/billing-agent/skills/invoice.lookup/versions/2.0.0"


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


async def test_idp_tokens_release_details(idp_client, idp, billing, tenant, db):
    for typ in ("JWT", "at+jwt", "application/at+jwt", None):
        token = idp.token(idp.claims(tenant, "invoice:read", ["eu"]), typ=typ)
        assert ("typ" in jwt.get_unverified_header(token)) == (typ is not None)
        response = await idp_client.get(billing, headers=bearer(token))
        assert response.status_code == 200, (typ, response.text)
        assert response.json()["inputSchema"] == BILLING["skills"][0]["inputSchema"]
    event = await db.fetchrow(
        "SELECT type, actor, actor_tenant, actor_issuer, request_id FROM audit_events WHERE trace_id = $1",
        response.headers["x-trace-id"],
    )
    assert tuple(event) == ("detail.released", "idp-router", tenant, IDP, response.headers["x-request-id"])
    # The same checks apply to IdP callers: another tenant sees nothing, a missing scope is 403.
    stranger = await idp_client.get(
        billing, headers=bearer(idp.token(idp.claims("s" + tenant, "invoice:read", ["eu"])))
    )
    assert stranger.status_code == 404
    no_scope = await idp_client.get(billing, headers=bearer(idp.token(idp.claims(tenant, "", ["eu"]))))
    assert no_scope.status_code == 403 and no_scope.json()["missingScopes"] == ["invoice:read"]
    # An array `scope` (some IdPs emit one) is read as the list of scopes.
    listed = await idp_client.get(billing, headers=bearer(idp.token(idp.claims(tenant, ["invoice:read"], ["eu"]))))
    assert listed.status_code == 200, listed.text


async def test_capreg_keys_still_work_next_to_the_idp(idp_client, client, mint, billing, tenant):
    own = mint(tenant, "router", "invoice:read", regions=["eu"])
    response = await idp_client.get(billing, headers=own)
    assert response.status_code == 200, response.text


async def test_kid_is_looked_up_only_in_the_issuers_own_key_set(idp_client, idp, billing, tenant, registry):
    claims = idp.claims(tenant, "invoice:read", ["eu"])
    capreg_kid = registry.keyring.signing_kid
    # IdP issuer, signed by capreg's own key under capreg's kid: capreg's key set is not the IdP's.
    by_capreg_key = registry.keyring.sign(claims, typ="at+jwt")
    assert jwt.get_unverified_header(by_capreg_key)["kid"] == capreg_kid
    # IdP issuer and key, but naming capreg's kid.
    by_idp_key = idp.token(claims, kid=capreg_kid)
    # An EdDSA key the IdP never published, under capreg's kid.
    by_stranger_key = idp.token(claims, kid=capreg_kid, key=Ed25519PrivateKey.generate(), alg="EdDSA")
    for token in (by_capreg_key, by_idp_key, by_stranger_key):
        response = await idp_client.get(billing, headers=bearer(token))
        assert response.status_code == 401, response.text
        assert response.json()["code"] == "invalid_token"
        assert response.headers["www-authenticate"].startswith("Bearer")


async def test_untrusted_or_wrong_tokens_are_401(idp_client, client, idp, billing, tenant):
    good = idp.claims(tenant, "invoice:read", ["eu"])
    impostor_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cases = {
        "unknown issuer": idp.token({**good, "iss": "https://other-idp.example.test/"}),
        "wrong audience": idp.token({**good, "aud": "someone-else"}),
        "expired": idp.token({**good, "iat": int(time.time()) - 600, "exp": int(time.time()) - 300}),
        "no tenant": idp.token({k: v for k, v in good.items() if k != "tenant"}),
        "bad signature": idp.token(good, key=impostor_key),
        "unknown kid": idp.token(good, kid="idp-rsa-2"),
        "ticket typ": idp.token(good, typ="capreg-ticket+jwt"),
        "other typ": idp.token(good, typ="id_token+jwt"),
        "alg none": jwt.encode(good, None, algorithm="none", headers={"kid": IDP_KID}),
        "HS256 with the public key": jwt.encode(
            good, "not-a-secret-key-of-enough-length!!", algorithm="HS256", headers={"kid": IDP_KID}
        ),
    }
    for name, token in cases.items():
        response = await idp_client.get(billing, headers=bearer(token))
        assert response.status_code == 401, (name, response.text)
        assert response.json()["code"] == "invalid_token"
    # The app without the IdP configured refuses its tokens: the trust is configuration, not the token.
    response = await client.get(billing, headers=bearer(idp.token(good)))
    assert response.status_code == 401


def test_trusted_issuers_setting_reads_a_jwks_file(idp):
    settings = load_settings(
        {
            "CAPREG_TRUSTED_ISSUERS": json.dumps(
                [{"issuer": IDP, "jwksFile": str(idp.jwks_file), "tenants": ["acme", "globex"]}]
            )
        }
    )
    assert settings.trusted_issuers == [
        TrustedIssuer(issuer=IDP, tenants=["acme", "globex"], jwks_file=str(idp.jwks_file))
    ]


@pytest.mark.parametrize("tenants", [None, [], [""]])
def test_an_issuer_without_tenants_stops_start_up_with_a_message_that_says_so(idp, tenants):
    entry = {"issuer": IDP, "jwksFile": str(idp.jwks_file)}
    if tenants is not None:
        entry["tenants"] = tenants
    with pytest.raises(SystemExit) as stopped:
        load_settings({"CAPREG_TRUSTED_ISSUERS": json.dumps([entry])})
    assert "tenants" in str(stopped.value) and IDP in str(stopped.value)
    assert '"*"' in str(stopped.value)


# ---------------------------------------------------------------------------
# Issuers bound to tenants; key sets re-read without a restart


@pytest.fixture
async def bound(database_url, tenant):
    """A capreg trusting a fresh IdP for `tenant` only (its own JWKS file, so tests can rewrite it)."""
    provider = IdentityProvider(Path(tempfile.mkdtemp(prefix="capreg-idp-")))
    settings = Settings(
        database_url=database_url,
        home=Path(tempfile.mkdtemp(prefix="capreg-home-")),
        trusted_issuers=[TrustedIssuer(issuer=IDP, tenants=[tenant], jwks_file=str(provider.jwks_file))],
    )
    async with running_app(settings) as (application, client):
        yield provider, client, application.state.registry


async def test_an_issuer_cannot_speak_for_a_tenant_it_is_not_bound_to(
    bound, client, mint, billing, tenant, other_tenant, db
):
    provider, partner, registry = bound
    victim = other_tenant
    await client.put(
        f"/v1/agents/{victim}/billing-agent",
        json={**BILLING, "visibility": "tenant"},
        headers=mint(victim, "publisher", "registry:publish"),
    )
    own = await partner.get(billing, headers=bearer(provider.token(provider.claims(tenant, "invoice:read", ["eu"]))))
    assert own.status_code == 200, own.text
    # The partner's IdP claims the victim's tenant, with admin rights: the token is not valid at all.
    head = await db.fetchval("SELECT coalesce(max(seq), 0) FROM audit_events")
    before = registry.auth_failures["tenant_not_allowed"]
    claimed = bearer(provider.token(provider.claims(victim, "invoice:read registry:admin", ["eu"])))
    detail = await partner.get(
        f"/v1/agents/{victim}/billing-agent/skills/invoice.lookup/versions/2.0.0", headers=claimed
    )
    assert detail.status_code == 401 and detail.json()["code"] == "invalid_token"
    deprecate = await partner.post(
        f"/v1/agents/{victim}/billing-agent/skills/invoice.lookup/versions/2.0.0/deprecate", json={}, headers=claimed
    )
    assert deprecate.status_code == 401
    assert registry.auth_failures["tenant_not_allowed"] - before == 2
    # Not audited (no principal), and nothing changed.
    assert await db.fetchval("SELECT count(*) FROM audit_events WHERE seq > $1 AND tenant = $2", head, victim) == 0
    assert await db.fetchval("SELECT status FROM capability_versions WHERE tenant = $1", victim) == "active"
    metrics = (await partner.get("/metrics")).text
    assert 'capreg_auth_failures_total{reason="tenant_not_allowed"}' in metrics


async def wait_for(predicate, seconds: float = 5.0):
    deadline = time.monotonic() + seconds
    while True:
        result = await predicate()
        if result or time.monotonic() > deadline:
            return result
        await asyncio.sleep(0.2)


async def test_a_new_key_verifies_and_a_removed_key_stops_without_a_restart(bound, billing, tenant):
    provider, partner, _ = bound
    claims = provider.claims(tenant, "invoice:read", ["eu"], exp=int(time.time()) + 3600)
    old_token = provider.token(claims)
    assert (await partner.get(billing, headers=bearer(old_token))).status_code == 200  # now cached as verified
    # The IdP adds a key: a token naming it verifies at once (an unknown kid re-reads the file).
    new_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    both = [jwk_of(provider.key.public_key(), IDP_KID, "RS256"), jwk_of(new_key.public_key(), "idp-rsa-2", "RS256")]
    provider.jwks_file.write_text(json.dumps({"keys": both}))
    new_token = provider.token(provider.claims(tenant, "invoice:read", ["eu"]), kid="idp-rsa-2", key=new_key)
    assert (await partner.get(billing, headers=bearer(new_token))).status_code == 200
    # The IdP drops the old key: tokens it signed, verified before or not, stop working within seconds.
    provider.jwks_file.write_text(json.dumps({"keys": both[1:]}))

    async def refused() -> bool:
        return (await partner.get(billing, headers=bearer(old_token))).status_code == 401

    assert await wait_for(refused, 10), "a removed key kept verifying"
    fresh_old = provider.token(provider.claims(tenant, "invoice:read", ["eu"]))
    assert (await partner.get(billing, headers=bearer(fresh_old))).status_code == 401
    assert (await partner.get(billing, headers=bearer(new_token))).status_code == 200


def test_jwks_url_refetch_follows_cache_headers_within_bounds():
    assert url_refetch_after("public, max-age=45") == 45
    assert url_refetch_after("max-age=5") == URL_MIN_SECONDS  # never hammer the IdP
    assert url_refetch_after("max-age=86400") == URL_MAX_SECONDS  # a removed key goes within 60 s
    assert url_refetch_after(None) == URL_MAX_SECONDS


async def test_an_unknown_kid_refetches_a_jwks_url_at_most_once_per_30_seconds(monkeypatch):
    now = [1000.0]
    trusted = TrustedIssuer(issuer=IDP, tenants=["*"], jwks_url="https://idp.example.test/jwks")
    refresher = IssuerKeyRefresher([trusted], {}, clock=lambda: now[0])
    fetched = []

    async def reread(issuer):
        fetched.append(now[0])
        refresher._last_fetch[issuer.issuer] = now[0]

    monkeypatch.setattr(refresher, "_reread", reread)
    for step in range(0, 70, 5):  # a token with an unknown kid every 5 s for 70 s
        now[0] = 1000.0 + step
        await refresher.unknown_kid(IDP)
    assert fetched == [1030.0, 1060.0]
