"""Publisher keys and publisher signatures (docs/api.md#signed-cards): keys validated, signed
registrations accepted, unsigned and badly signed ones refused and audited with nothing applied,
no downgrade, the registration body returned byte for byte, and the CLI round trip."""

from __future__ import annotations

import base64
import json
import secrets

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from jwt.algorithms import ECAlgorithm, OKPAlgorithm

from registry.agents.publisher_signatures import jwks_errors, verify_registration
from registry.client.signing import registration_payload, sign_registration
from tests.conftest import capreg, count_rows, example


def _pem(private) -> bytes:
    return private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def ed25519(kid: str):
    private = Ed25519PrivateKey.generate()
    jwk = OKPAlgorithm.to_jwk(private.public_key(), as_dict=True) | {"kid": kid}
    return _pem(private), jwk


def p256(kid: str):
    private = ec.generate_private_key(ec.SECP256R1())
    jwk = ECAlgorithm.to_jwk(private.public_key(), as_dict=True) | {"kid": kid}
    return _pem(private), jwk


def signed_body(card: dict, pem: bytes, kid: str, tenant: str, agent_id: str = "billing-agent") -> bytes:
    return json.dumps(sign_registration(card, pem, kid, tenant=tenant, agent_id=agent_id)).encode()


async def events(db, tenant: str, type_: str):
    return await db.fetch(
        "SELECT outcome, reason FROM audit_events WHERE tenant = $1 AND type = $2 ORDER BY seq", tenant, type_
    )


@pytest.fixture
def admin(mint, tenant):
    return mint(tenant, "admin", "registry:admin registry:read")


@pytest.fixture
def publish(mint, tenant):
    return mint(tenant, "publisher", "registry:publish")


# --- keys --------------------------------------------------------------------------------------


def test_jwks_validation():
    _, good = ed25519("a")
    _, ec_key = p256("b")
    assert jwks_errors([good, ec_key]) == []
    assert jwks_errors([good | {"d": "AAAA"}])[0].path == "/keys/0/d"
    assert "private" in jwks_errors([ec_key | {"d": "AAAA"}])[0].message
    assert jwks_errors([good, dict(good)])[0].path == "/keys/1/kid"
    assert "at most 20" in jwks_errors([ed25519(f"k{i}")[1] for i in range(21)])[0].message
    assert jwks_errors([good | {"crv": "X25519"}])[0].path == "/keys/0/kty"
    assert jwks_errors([ec_key | {"crv": "P-384"}])[0].path == "/keys/0/kty"
    assert jwks_errors([{"kty": "RSA", "n": "x", "e": "AQAB", "kid": "r"}])[0].path == "/keys/0/kty"
    assert jwks_errors([{"kty": "oct", "k": "c2VjcmV0", "kid": "h"}])[0].path == "/keys/0/k"
    assert jwks_errors([{k: v for k, v in good.items() if k != "kid"}])[0].path == "/keys/0/kid"
    assert jwks_errors([good | {"alg": "ES256"}])[0].path == "/keys/0/alg"
    assert jwks_errors([ec_key | {"y": ec_key["x"]}])  # not a point on the curve
    assert jwks_errors(["not a key"])[0].path == "/keys/0"


async def test_publisher_keys_put_get_and_audit(client, db, admin, mint, tenant, other_tenant):
    _, key_a = ed25519("a")
    _, key_b = p256("b")
    response = await client.put(f"/v1/tenants/{tenant}/publisher-keys", json={"keys": [key_a, key_b]}, headers=admin)
    assert response.status_code == 200, response.text
    got = await client.get(f"/v1/tenants/{tenant}/publisher-keys", headers=admin)
    assert got.status_code == 200 and [k["kid"] for k in got.json()["keys"]] == ["a", "b"]
    assert [tuple(e) for e in await events(db, tenant, "tenant.keys.updated")] == [("allowed", "kids: a b")]

    # Refused: private members, too many keys, duplicates; each audited, nothing changed.
    for keys in (
        [key_a | {"d": "AAAA"}],
        [ed25519(f"k{i}")[1] for i in range(21)],
        [key_a, key_a],
        [{"kty": "EC", "crv": "P-521", "x": "a", "y": "b", "kid": "c"}],
    ):
        refused = await client.put(f"/v1/tenants/{tenant}/publisher-keys", json={"keys": keys}, headers=admin)
        assert refused.status_code == 400 and refused.json()["code"] == "invalid_request", refused.text
    ten_thousand = await client.put(
        f"/v1/tenants/{tenant}/publisher-keys", json={"keys": [key_a] * 10_000}, headers=admin
    )
    assert ten_thousand.status_code == 400
    got = await client.get(f"/v1/tenants/{tenant}/publisher-keys", headers=admin)
    assert [k["kid"] for k in got.json()["keys"]] == ["a", "b"]
    assert [e["outcome"] for e in await events(db, tenant, "tenant.keys.updated")] == ["allowed"] + ["denied"] * 5

    # Scope and tenant.
    publisher_only = mint(tenant, "p", "registry:publish")
    assert (
        await client.put(f"/v1/tenants/{tenant}/publisher-keys", json={"keys": []}, headers=publisher_only)
    ).status_code == 403
    stranger = mint(other_tenant, "admin", "registry:admin registry:read")
    assert (await client.put(f"/v1/tenants/{tenant}/publisher-keys", json={"keys": []}, headers=stranger)).json()[
        "code"
    ] == "tenant_mismatch"
    assert (await client.get(f"/v1/tenants/{tenant}/publisher-keys", headers=stranger)).status_code == 403
    assert (await client.get(f"/v1/tenants/{tenant}/publisher-keys")).status_code == 401


# --- registrations -----------------------------------------------------------------------------


async def test_signed_registration_flow(client, db, admin, publish, mint, tenant):
    pem_a, key_a = ed25519("key-a")
    pem_b, key_b = p256("key-b")
    card = example("billing-agent.json")
    url = f"/v1/agents/{tenant}/billing-agent"
    assert (
        await client.put(f"/v1/tenants/{tenant}/publisher-keys", json={"keys": [key_a, key_b]}, headers=admin)
    ).status_code == 200

    # Unsigned: 400 signature_required, audited, nothing applied.
    unsigned = await client.put(url, json=card, headers=publish)
    assert unsigned.status_code == 400 and unsigned.json()["code"] == "signature_required", unsigned.text
    assert await count_rows(db, "agents", tenant=tenant) == 0
    assert [tuple(e) for e in await events(db, tenant, "agent.registered")] == [("denied", "signature_required")]

    # Bad signatures: over other bytes, unknown kid, alg none, HS256 with the public key as secret.
    other = signed_body({**card, "description": "something else"}, pem_a, "key-a", tenant)
    over_other_bytes = json.loads(other) | {"description": card["description"]}

    def forged_header(header):
        return base64.urlsafe_b64encode(json.dumps(header).encode()).rstrip(b"=").decode()

    import hashlib
    import hmac

    payload = (
        base64.urlsafe_b64encode(registration_payload(card, tenant=tenant, agent_id="billing-agent"))
        .rstrip(b"=")
        .decode()
    )
    hs_header = forged_header({"alg": "HS256", "kid": "key-a"})
    hs_sig = (
        base64.urlsafe_b64encode(
            hmac.new(json.dumps(key_a).encode(), f"{hs_header}.{payload}".encode(), hashlib.sha256).digest()
        )
        .rstrip(b"=")
        .decode()
    )
    bad_bodies = [
        over_other_bytes,
        json.loads(signed_body(card, pem_a, "key-zzz", tenant)),
        card | {"signatures": [{"protected": forged_header({"alg": "none", "kid": "key-a"}), "signature": "x"}]},
        card | {"signatures": [{"protected": hs_header, "signature": hs_sig}]},
        card | {"signatures": [{"protected": "!!!", "signature": "x"}]},
        json.loads(signed_body(card, pem_a, "key-b", tenant)),  # Ed25519 signature under the P-256 kid
    ]
    for body in bad_bodies:
        refused = await client.put(url, json=body, headers=publish)
        assert refused.status_code == 400 and refused.json()["code"] == "signature_invalid", refused.text
    too_many = card | {"signatures": [{"protected": "a", "signature": "b"}] * 1000}
    assert (await client.put(url, json=too_many, headers=publish)).status_code == 400
    assert await count_rows(db, "agents", tenant=tenant) == 0
    assert [e["reason"] for e in await events(db, tenant, "agent.registered")][1:] == ["signature_invalid"] * len(
        bad_bodies
    )

    # Signed (EdDSA): accepted; the kid is in the event and the views.
    body = signed_body(card, pem_a, "key-a", tenant)
    accepted = await client.put(url, content=body, headers=publish | {"content-type": "application/json"})
    assert accepted.status_code == 201, accepted.text
    assert accepted.json()["agent"]["publisher"] == {"signed": True, "kid": "key-a"}
    assert (await events(db, tenant, "agent.registered"))[-1]["reason"] == "key-a"
    view = (await client.get(url)).json()
    assert view["publisher"] == {"signed": True, "kid": "key-a"}
    reader = mint(tenant, "router", "registry:read invoice:read", regions=["eu"])
    detail = await client.get(f"{url}/skills/invoice.lookup/versions/latest", headers=reader)
    assert detail.json()["publisher"] == {"signed": True, "kid": "key-a"}

    # The registration as signed, byte for byte; it verifies against the tenant's keys.
    registration = await client.get(f"{url}/registration", headers=publish)
    assert registration.status_code == 200 and registration.content == body
    assert verify_registration(
        registration.content, json.loads(registration.content)["signatures"], [key_a, key_b], tenant, "billing-agent"
    ) == ("key-a", "")
    auditor = mint(tenant, "auditor", "audit:read")
    assert (await client.get(f"{url}/registration", headers=auditor)).content == body
    assert (await client.get(f"{url}/registration", headers=reader)).status_code == 403
    assert (await client.get(f"{url}/registration")).status_code == 401

    # Same bytes again: unchanged (fast path). ES256 signature over a new card version: accepted.
    assert (
        await client.put(url, content=body, headers=publish | {"content-type": "application/json"})
    ).status_code == 200
    v2 = {**card, "version": "1.5.0"}
    es = await client.put(
        url, content=signed_body(v2, pem_b, "key-b", tenant), headers=publish | {"content-type": "application/json"}
    )
    assert es.status_code == 200 and es.json()["agent"]["publisher"] == {"signed": True, "kid": "key-b"}, es.text

    # No downgrade: keys removed, an unsigned registration is still refused, nothing applied.
    assert (
        await client.put(f"/v1/tenants/{tenant}/publisher-keys", json={"keys": []}, headers=admin)
    ).status_code == 200
    v3 = {**card, "version": "1.6.0"}
    downgrade = await client.put(url, json=v3, headers=publish)
    assert downgrade.status_code == 400 and downgrade.json()["code"] == "signature_required", downgrade.text
    assert (await client.get(url)).json()["version"] == "1.5.0"
    # The bytes last applied, signed by a key that is gone: not answered as unchanged.
    stale = await client.put(
        url, content=signed_body(v2, pem_b, "key-b", tenant), headers=publish | {"content-type": "application/json"}
    )
    assert stale.status_code == 400 and stale.json()["code"] == "signature_invalid"


async def test_keys_set_after_an_unsigned_registration_require_a_signature(client, admin, publish, tenant):
    card = example("billing-agent.json")
    url = f"/v1/agents/{tenant}/billing-agent"
    body = json.dumps(card).encode()
    assert (
        await client.put(url, content=body, headers=publish | {"content-type": "application/json"})
    ).status_code == 201
    assert (await client.get(url)).json()["publisher"] == {"signed": False}
    _, key = ed25519("k")
    assert (
        await client.put(f"/v1/tenants/{tenant}/publisher-keys", json={"keys": [key]}, headers=admin)
    ).status_code == 200
    again = await client.put(url, content=body, headers=publish | {"content-type": "application/json"})
    assert again.status_code == 400 and again.json()["code"] == "signature_required"


async def test_a_kid_bound_to_another_key_refuses_the_bytes_the_old_key_signed(client, admin, publish, tenant):
    """The exact bytes last applied, sent again after their kid was bound to another key, are checked
    against that key and refused (they were answered 200 unchanged: the fast path compared kids only)."""
    url = f"/v1/agents/{tenant}/billing-agent"
    pem, key = ed25519("k")
    assert (
        await client.put(f"/v1/tenants/{tenant}/publisher-keys", json={"keys": [key]}, headers=admin)
    ).status_code == 200
    body = signed_body(example("billing-agent.json"), pem, "k", tenant)
    headers = publish | {"content-type": "application/json"}
    assert (await client.put(url, content=body, headers=headers)).status_code == 201
    assert (await client.put(url, content=body, headers=headers)).status_code == 200  # unchanged
    _, other = ed25519("k")
    assert (
        await client.put(f"/v1/tenants/{tenant}/publisher-keys", json={"keys": [other]}, headers=admin)
    ).status_code == 200
    again = await client.put(url, content=body, headers=headers)
    assert again.status_code == 400 and again.json()["code"] == "signature_invalid", again.text


async def test_a_signed_body_replayed_to_another_agent_or_tenant_is_signature_invalid(
    client, db, admin, publish, mint, tenant, other_tenant
):
    """Issue 35 item 2: a stolen `registry:publish` token read one agent's signed body from
    `GET .../registration` and PUT it to another agent id, which took the source's visibility and
    sharing. The tenant and agent id are in the signed bytes: a replay to any other resource fails."""
    pem, key = ed25519("k")
    for owner, token in ((tenant, admin), (other_tenant, mint(other_tenant, "admin", "registry:admin"))):
        put = await client.put(f"/v1/tenants/{owner}/publisher-keys", json={"keys": [key]}, headers=token)
        assert put.status_code == 200, put.text
    headers = publish | {"content-type": "application/json"}
    body = signed_body(example("billing-agent.json"), pem, "k", tenant, "billing-agent")
    source = await client.put(f"/v1/agents/{tenant}/billing-agent", content=body, headers=headers)
    assert source.status_code == 201, source.text
    # The target: a tenant-only agent, signed for its own id.
    private = {**example("billing-agent.json"), "visibility": "tenant", "name": "Internal Ledger"}
    target = signed_body(private, pem, "k", tenant, "internal-ledger")
    assert (
        await client.put(f"/v1/agents/{tenant}/internal-ledger", content=target, headers=headers)
    ).status_code == 201
    before = (
        await count_rows(db, "agents", tenant=tenant),
        await count_rows(db, "capability_versions", tenant=tenant),
        await count_rows(db, "audit_events", tenant=tenant, outcome="allowed"),
    )

    stolen = (await client.get(f"/v1/agents/{tenant}/billing-agent/registration", headers=publish)).content
    assert stolen == body
    for agent_id in ("internal-ledger", "brand-new-agent"):
        replayed = await client.put(f"/v1/agents/{tenant}/{agent_id}", content=stolen, headers=headers)
        assert replayed.status_code == 400, replayed.text
        assert replayed.headers["content-type"].startswith("application/problem+json")
        assert replayed.json()["code"] == "signature_invalid" and replayed.json()["errors"][0]["path"] == "/signatures"
    other_publish = mint(other_tenant, "publisher", "registry:publish") | {"content-type": "application/json"}
    across = await client.put(f"/v1/agents/{other_tenant}/billing-agent", content=stolen, headers=other_publish)
    assert across.status_code == 400 and across.json()["code"] == "signature_invalid", across.text

    assert await count_rows(db, "agents", tenant=other_tenant) == 0
    after = (
        await count_rows(db, "agents", tenant=tenant),
        await count_rows(db, "capability_versions", tenant=tenant),
        await count_rows(db, "audit_events", tenant=tenant, outcome="allowed"),
    )
    assert after == before
    ledger = await client.get(f"/v1/agents/{tenant}/internal-ledger", headers=mint(tenant, "r", "registry:read"))
    assert ledger.json()["visibility"] == "tenant" and ledger.json()["name"] == "Internal Ledger"
    assert [e["reason"] for e in await events(db, tenant, "agent.registered")][-2:] == ["signature_invalid"] * 2


async def test_another_tenants_auditor_reading_a_registration_gets_404_not_403(
    client, db, publish, mint, tenant, other_tenant
):
    """Issue 35 item 6: another tenant's auditor got 403 for a visible agent's registration (and 404 for
    an absent one), which told it the agent exists. Across tenants the answer is 404, everywhere."""
    url = f"/v1/agents/{tenant}/billing-agent"
    assert (await client.put(url, json=example("billing-agent.json"), headers=publish)).status_code == 201
    assert (await client.get(url)).status_code == 200  # public: visible to everyone
    for scopes in ("audit:read", "registry:publish", "audit:read registry:publish registry:read"):
        stranger = mint(other_tenant, "auditor", scopes)
        response = await client.get(f"{url}/registration", headers=stranger)
        assert response.status_code == 404, (scopes, response.text)
        assert response.headers["content-type"].startswith("application/problem+json")
        absent = await client.get(f"/v1/agents/{tenant}/no-such-agent/registration", headers=stranger)
        assert (absent.status_code, absent.json()["code"]) == (404, response.json()["code"]) == (404, "not_found")
        assert absent.json()["detail"] == response.json()["detail"]
    own_auditor = mint(tenant, "auditor", "audit:read")
    assert (await client.get(f"{url}/registration", headers=own_auditor)).status_code == 200


@hypothesis_settings(max_examples=40, deadline=None)
@given(
    st.dictionaries(
        st.text(max_size=6), st.one_of(st.integers(-1000, 1000), st.text(max_size=8), st.booleans()), max_size=6
    )
)
def test_any_change_to_the_signed_body_fails(extra):
    pem, key = ed25519("k")
    card = {**example("billing-agent.json"), **{f"x{k}": v for k, v in extra.items()}}
    signed = sign_registration(card, pem, "k", tenant="t", agent_id="a")
    body = json.dumps(signed).encode()
    assert verify_registration(body, signed["signatures"], [key], "t", "a")[0] == "k"
    changed = json.dumps(signed | {"description": signed["description"] + "."}).encode()
    assert verify_registration(changed, signed["signatures"], [key], "t", "a")[0] is None
    # The same bytes for another resource: the tenant and agent id are signed too.
    assert verify_registration(body, signed["signatures"], [key], "t", "b")[0] is None
    assert verify_registration(body, signed["signatures"], [key], "u", "a")[0] is None


def test_bodies_without_a_canonical_form_are_invalid():
    pem, key = ed25519("k")
    signed = sign_registration(example("billing-agent.json"), pem, "k", tenant="t", agent_id="a")
    for raw in (b'{"a": 9007199254740993, "signatures": []}', b'{"a": 1e400}', b"[1]"):
        kid, why = verify_registration(raw, signed["signatures"], [key], "t", "a")
        assert kid is None and why


# --- CLI round trip ----------------------------------------------------------------------------


def test_cli_sign_register_verify_round_trip(live_server, tmp_path):
    base, env, _ = live_server
    tenant = "c" + secrets.token_hex(5)
    env = {**env, "CAPREG_URL": base}
    token = capreg(
        env,
        "token",
        "mint",
        "--tenant",
        tenant,
        "--sub",
        "ops",
        "--scope",
        "registry:admin registry:publish registry:read",
    ).stdout.strip()
    env["CAPREG_TOKEN"] = token
    pem, key = ed25519("cli-key")
    (tmp_path / "key.pem").write_bytes(pem)
    (tmp_path / "card.json").write_text(json.dumps(example("billing-agent.json")))
    import httpx

    put = httpx.put(
        f"{base}/v1/tenants/{tenant}/publisher-keys", json={"keys": [key]}, headers={"Authorization": f"Bearer {token}"}
    )
    assert put.status_code == 200, put.text
    unsigned = capreg(
        env, "register", str(tmp_path / "card.json"), "--tenant", tenant, "--agent-id", "billing-agent", check=False
    )
    assert unsigned.returncode == 1 and "signature_required" in unsigned.stderr
    signed = capreg(
        env,
        "card",
        "sign",
        str(tmp_path / "card.json"),
        "--key",
        str(tmp_path / "key.pem"),
        "--kid",
        "cli-key",
        "--tenant",
        tenant,
        "--agent-id",
        "billing-agent",
    )
    (tmp_path / "signed.json").write_text(signed.stdout)
    assert json.loads(signed.stdout)["signatures"][0]["protected"]
    capreg(env, "register", str(tmp_path / "signed.json"), "--tenant", tenant, "--agent-id", "billing-agent")
    elsewhere = capreg(
        env, "register", str(tmp_path / "signed.json"), "--tenant", tenant, "--agent-id", "other-agent", check=False
    )
    assert elsewhere.returncode == 1 and "signature_invalid" in elsewhere.stderr
    verified = capreg(env, "card", "verify", f"{tenant}/billing-agent")
    assert "signature verified" in verified.stdout
    registration = httpx.get(
        f"{base}/v1/agents/{tenant}/billing-agent/registration", headers={"Authorization": f"Bearer {token}"}
    )
    assert registration.content == (tmp_path / "signed.json").read_bytes()
    bad_key = capreg(
        env,
        "card",
        "sign",
        str(tmp_path / "card.json"),
        "--key",
        str(tmp_path / "card.json"),
        "--kid",
        "x",
        "--tenant",
        tenant,
        "--agent-id",
        "billing-agent",
        check=False,
    )
    assert bad_key.returncode == 2 and "Traceback" not in bad_key.stderr
