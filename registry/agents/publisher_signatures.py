"""Publisher keys and publisher signatures (docs/api.md#signed-cards), pure: no I/O.

A tenant's publisher keys are a JWKS of at most 20 public keys, Ed25519 (`OKP`) or P-256 (`EC`),
each with a unique `kid` (`jwks_errors`). Once a tenant has keys, a registration must carry in
`signatures` a detached JWS (`EdDSA` or `ES256`, `kid` among the keys) over the RFC 8785 canonical
form of the request body without `signatures`, bound to the tenant and agent id of the path it is
PUT to (`signed_payload`, by the `rfc8785` package, the definition publishers use too,
registry.client.signing; capreg has no canonicalizer of its own): a signed body replayed to another
agent or tenant does not verify. `verify_registration` finds the first valid one.

Every input here is a registrant's: sizes are bounded before any work (signature count and
lengths by the body's type, registry.core.records), the algorithm comes from an allow-list and must
match the key's type (no `none`, no HS256 with a public key as its secret), a key is chosen by
`kid` from the tenant's own set only (never by a URL in the header), and verification runs in a
worker process (registry.core.bounded_checks.bounded) because canonicalizing a 1 MiB body takes a while.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

import msgspec
import rfc8785
from jwt import PyJWK, api_jws
from jwt.exceptions import PyJWKError, PyJWTError

from registry.core.problems import ErrorItem
from registry.core.registration_payload import registration_payload

MAX_PUBLISHER_KEYS = 20
# The key types a publisher key may be, and the one algorithm each signs with.
KEY_ALGORITHMS = {("OKP", "Ed25519"): "EdDSA", ("EC", "P-256"): "ES256"}
SIGNATURE_ALGORITHMS = frozenset(KEY_ALGORITHMS.values())
_PUBLIC_MEMBERS = {
    ("OKP", "Ed25519"): {"kty", "crv", "x", "kid", "alg", "use", "key_ops"},
    ("EC", "P-256"): {"kty", "crv", "x", "y", "kid", "alg", "use", "key_ops"},
}
# Members that carry private (or symmetric) key material in any JWK type (RFC 7517, 7518, 8037).
PRIVATE_MEMBERS = ("d", "p", "q", "dp", "dq", "qi", "oth", "k")
KID_PATTERN = re.compile(r"^[\x21-\x7e]{1,128}$")
# Header members a publisher signature may carry; anything else (`crit`, `b64`, `jwk`, `x5u`...)
# would change how it is verified or where its key comes from.
_HEADER_MEMBERS = {"alg", "kid", "typ", "jku", "cty"}
MAX_REASON = 200


class NotCanonical(ValueError):
    """The body has no RFC 8785 canonical form."""


# --- Publisher keys --------------------------------------------------------------------------


def jwks_errors(keys: list[Any]) -> list[ErrorItem]:
    """Why `keys` (the `keys` of a PUT body) is not an acceptable set of publisher keys; empty when it is."""
    if len(keys) > MAX_PUBLISHER_KEYS:
        return [ErrorItem(path="/keys", message=f"at most {MAX_PUBLISHER_KEYS} publisher keys, got {len(keys)}")]
    errors: list[ErrorItem] = []
    seen: set[str] = set()
    for index, key in enumerate(keys):
        path = f"/keys/{index}"
        problem = _key_problem(key)
        if problem is not None:
            errors.append(ErrorItem(path=path + problem[0], message=problem[1]))
            continue
        if key["kid"] in seen:
            errors.append(ErrorItem(path=path + "/kid", message=f"kid {key['kid']!r} appears twice"))
        seen.add(key["kid"])
    return errors


def _key_problem(key: Any) -> tuple[str, str] | None:
    """(pointer within the key, message) of the first thing wrong with one publisher key."""
    if not isinstance(key, dict):
        return "", "a key is a JSON object (a JWK)"
    private = [member for member in PRIVATE_MEMBERS if member in key]
    if private:
        return f"/{private[0]}", f"private key member {private[0]!r}: publish public keys only"
    kind = (key.get("kty"), key.get("crv"))
    if kind not in KEY_ALGORITHMS:
        return (
            "/kty",
            'a publisher key is Ed25519 ("kty": "OKP", "crv": "Ed25519") or P-256 ("kty": "EC", "crv": "P-256")',
        )
    unknown = sorted(set(key) - _PUBLIC_MEMBERS[kind])
    if unknown:
        return f"/{unknown[0][:64]}", f"unknown member {unknown[0][:64]!r} in a {kind[1]} key"
    kid = key.get("kid")
    if not isinstance(kid, str) or not KID_PATTERN.match(kid):
        return "/kid", "each key has a kid: 1 to 128 printable ASCII characters"
    if "alg" in key and key["alg"] != KEY_ALGORITHMS[kind]:
        return "/alg", f"a {kind[1]} key signs with {KEY_ALGORITHMS[kind]}"
    if "use" in key and key["use"] != "sig":
        return "/use", 'a publisher key is a signing key ("use": "sig")'
    if "key_ops" in key and key["key_ops"] != ["verify"]:
        return "/key_ops", 'a publisher key only verifies ("key_ops": ["verify"])'
    coordinates = ("x",) if kind[0] == "OKP" else ("x", "y")
    for name in coordinates:
        if not isinstance(key.get(name), str) or len(key[name]) != 43:
            return f"/{name}", f"{name} is the base64url of 32 bytes"
    try:
        PyJWK(key, algorithm=KEY_ALGORITHMS[kind])  # a point that is not on the curve fails here
    except (PyJWKError, PyJWTError, ValueError, binascii.Error) as exc:
        return "", f"not a valid {kind[1]} public key: {str(exc)[:MAX_REASON]}"
    return None


# --- Publisher signatures --------------------------------------------------------------------


def signed_payload(body: bytes, tenant: str, agent_id: str) -> bytes:
    """The bytes a publisher signs: the RFC 8785 form of the body without its top-level `signatures`,
    with the tenant and agent id it registers (registry.core.registration_payload, the one
    definition publishers use too)."""
    try:
        return registration_payload(body, tenant=tenant, agent_id=agent_id)
    except msgspec.DecodeError as exc:
        raise NotCanonical(f"the body is not JSON: {exc}") from None
    except (rfc8785.CanonicalizationError, RecursionError, ValueError) as exc:
        raise NotCanonical(f"the body has no RFC 8785 canonical form: {str(exc)[:MAX_REASON]}") from None


def verify_registration(
    body: bytes, signatures: list[dict[str, Any]], keys: list[dict], tenant: str, agent_id: str
) -> tuple[str | None, str]:
    """(kid of the first valid signature, "") or (None, why none is valid) for `body` PUT to
    `tenant`/`agent_id` (the path's, never the body's: a body names neither). Pure CPU."""
    if not keys:
        return None, "the tenant has no publisher keys to verify a signature with"
    try:
        payload = signed_payload(body, tenant, agent_id)
    except NotCanonical as exc:
        return None, str(exc)
    encoded_payload = base64.urlsafe_b64encode(payload).rstrip(b"=").decode()
    by_kid = {key["kid"]: key for key in keys}
    reasons: list[str] = []
    for index, signature in enumerate(signatures):
        kid, reason = _verify_one(signature, encoded_payload, by_kid)
        if kid is not None:
            return kid, ""
        reasons.append(f"signatures/{index}: {reason}")
    return None, "; ".join(reasons)[: MAX_REASON * 2] or "no signature"


def _verify_one(signature: dict[str, Any], encoded_payload: str, keys: dict[str, dict]) -> tuple[str | None, str]:
    protected, value = signature.get("protected"), signature.get("signature")
    if not isinstance(protected, str) or not isinstance(value, str):
        return None, "a signature has string members protected and signature"
    try:
        header = json.loads(base64.urlsafe_b64decode(protected + "=" * (-len(protected) % 4)))
    except (binascii.Error, ValueError, RecursionError):
        return None, "the protected header is not base64url JSON"
    if not isinstance(header, dict):
        return None, "the protected header is not a JSON object"
    extra = sorted(set(header) - _HEADER_MEMBERS)
    if extra:
        return None, f"header member {str(extra[0])[:32]!r} is not accepted"
    alg, kid = header.get("alg"), header.get("kid")
    if alg not in SIGNATURE_ALGORITHMS:
        return None, f"alg {str(alg)[:32]!r} is not accepted (EdDSA or ES256)"
    if not isinstance(kid, str) or kid not in keys:
        return None, f"kid {str(kid)[:64]!r} is not one of the tenant's publisher keys"
    jwk = keys[kid]
    if KEY_ALGORITHMS[(jwk["kty"], jwk["crv"])] != alg:
        return None, f"key {kid!r} does not sign with {alg}"
    try:
        api_jws.decode_complete(
            f"{protected}.{encoded_payload}.{value}", PyJWK(jwk, algorithm=alg).key, algorithms=[alg]
        )
    except (PyJWTError, PyJWKError, ValueError, binascii.Error):
        return None, f"the signature by {kid!r} does not verify over the body for this tenant and agent id"
    return kid, ""
