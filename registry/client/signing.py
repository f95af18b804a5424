"""Card signatures on the client side (docs/client.md#signed-cards): verifying the registry's
signature on a served card with a2a-sdk's own verifier, and signing a registration as a publisher.

- `CardKeys`: the registry's JWKS, cached; read again only for a `kid` it does not hold, at most
  once per `refetch_interval` seconds, and after `max_key_age`. The keys always come from the
  registry the client was made for, never from the `jku` a card names (a card is data).
- `verify_card`: a2a-sdk's `create_signature_verifier` (EdDSA only) over the card as its
  `AgentCard` message; any failure is `CapregError(code="invalid_signature")`.
- `registration_payload` / `sign_registration`: what a publisher signs, the RFC 8785 form (the
  `rfc8785` package) of `{"agentId", "registration", "tenant"}`: the registration body without
  `signatures` bound to the agent it registers, and the body with one detached JWS added (EdDSA for
  an Ed25519 key, ES256 for a P-256 key). The registry verifies with the same `registration_payload`.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from typing import Any

import jwt
import msgspec
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from registry.client.errors import CapregError
from registry.core.registration_payload import registration_payload

CARD_ALGORITHM = "EdDSA"
MAX_CARD_SIGNATURES = 8


def invalid_signature(message: str) -> CapregError:
    return CapregError(message, code="invalid_signature", reason="invalid_signature")


class CardKeys:
    """The registry's public keys by kid, cached (thread-safe). `fetch` returns the JWKS document."""

    def __init__(self, *, refetch_interval: float = 30.0, max_key_age: float = 300.0):
        self.refetch_interval, self.max_key_age = refetch_interval, max_key_age
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at: float | None = None
        self._lock = threading.Lock()

    def needs_fetch(self, kids: list[str]) -> bool:
        """Whether the JWKS should be read before verifying signatures by `kids`."""
        if self._fetched_at is None:
            return True
        age = time.monotonic() - self._fetched_at
        if age >= self.max_key_age:
            return True
        return not any(kid in self._keys for kid in kids) and age >= self.refetch_interval

    def store(self, document: Any) -> None:
        keys: dict[str, jwt.PyJWK] = {}
        for entry in document.get("keys", []) if isinstance(document, dict) else []:
            if not isinstance(entry, dict) or entry.get("kty") != "OKP" or not isinstance(entry.get("kid"), str):
                continue
            try:
                keys[entry["kid"]] = jwt.PyJWK(entry, algorithm=CARD_ALGORITHM)
            except jwt.PyJWKError:
                continue
        with self._lock:
            self._keys, self._fetched_at = keys, time.monotonic()

    def key(self, kid: str | None, jku: str | None) -> jwt.PyJWK:
        """a2a-sdk's key provider: by kid from the registry's own JWKS (`jku` is not followed)."""
        key = self._keys.get(kid) if isinstance(kid, str) else None
        if key is None:
            raise jwt.InvalidKeyError(f"the registry does not publish key {str(kid)[:64]!r}")
        return key


def signature_kids(card: Any) -> list[str]:
    """The kids the card's signatures name (unverified), to know whether the JWKS must be read."""
    kids: list[str] = []
    for entry in (card.get("signatures") or [])[:MAX_CARD_SIGNATURES] if isinstance(card, dict) else []:
        protected = entry.get("protected") if isinstance(entry, dict) else None
        if not isinstance(protected, str) or len(protected) > 4096:
            continue
        try:
            header = json.loads(base64.urlsafe_b64decode(protected + "=" * (-len(protected) % 4)))
        except ValueError:
            continue
        if isinstance(header, dict) and isinstance(header.get("kid"), str):
            kids.append(header["kid"])
    return kids


def verify_card(card: dict[str, Any], keys: CardKeys) -> None:
    """Raise CapregError(code="invalid_signature") unless a signature on `card` verifies with a key
    of the registry (a2a-sdk's verifier, so the canonical form is a2a-sdk's own)."""
    from a2a.types import AgentCard
    from a2a.utils.signing import SignatureVerificationError, create_signature_verifier
    from google.protobuf.json_format import ParseDict, ParseError

    if not isinstance(card, dict) or not card.get("signatures"):
        raise invalid_signature("the card carries no signature")
    if len(card["signatures"]) > MAX_CARD_SIGNATURES:
        raise invalid_signature(f"the card carries more than {MAX_CARD_SIGNATURES} signatures")
    try:
        message = ParseDict(card, AgentCard(), ignore_unknown_fields=True)
    except (ParseError, TypeError, ValueError) as exc:
        raise invalid_signature(f"the card is not an A2A AgentCard: {str(exc)[:200]}") from None
    verifier = create_signature_verifier(keys.key, [CARD_ALGORITHM])
    try:
        verifier(message)
    except SignatureVerificationError as exc:
        raise invalid_signature(f"no signature on the card verifies with the registry's keys ({exc})") from None


# ---------------------------------------------------------------------------
# Publishers


def _publisher_key(private_key: object) -> tuple[Ed25519PrivateKey | ec.EllipticCurvePrivateKey, str]:
    """`private_key` and the JWS algorithm it signs with; ValueError for any other kind of key."""
    if isinstance(private_key, Ed25519PrivateKey):
        return private_key, "EdDSA"
    if isinstance(private_key, ec.EllipticCurvePrivateKey) and isinstance(private_key.curve, ec.SECP256R1):
        return private_key, "ES256"
    raise ValueError("a publisher key is an Ed25519 or a P-256 private key")


def sign_registration(
    body: bytes | dict[str, Any], private_key_pem: bytes, kid: str, *, tenant: str, agent_id: str
) -> dict[str, Any]:
    """The registration body with one publisher signature (replacing any) for
    `PUT /v1/agents/{tenant}/{agent_id}` only: a detached JWS over `registration_payload(body,
    tenant=, agent_id=)` with `alg` and `kid` in its protected header."""
    private_key, algorithm = _publisher_key(serialization.load_pem_private_key(private_key_pem, password=None))
    value = msgspec.json.decode(body) if isinstance(body, bytes | str) else dict(body)
    payload = registration_payload(value, tenant=tenant, agent_id=agent_id)
    compact = jwt.api_jws.encode(payload, private_key, algorithm=algorithm, headers={"kid": kid, "typ": "JOSE"})
    protected, _, signature = compact.split(".")
    value["signatures"] = [{"protected": protected, "signature": signature}]
    return value
