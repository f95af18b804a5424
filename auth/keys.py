"""capreg's signing keys, pure: a new key, the keyring (every key that still verifies, the JWKS,
signing). Keeping them in the database is registry/core/signing_keys.py."""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Sequence

import jwt
import msgspec
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jws_header(kid: str, typ: str) -> bytes:
    """The protected header of capreg's EdDSA JWTs as signed: compact JSON, keys sorted (as PyJWT
    writes it, so tokens from either signing path look alike)."""
    return msgspec.json.encode({"alg": "EdDSA", "kid": kid, "typ": typ}, order="sorted")


def new_key() -> tuple[str, str, dict]:
    """A fresh Ed25519 key: (kid, private PEM, public JWK). kid is the RFC 7638 thumbprint."""
    private = Ed25519PrivateKey.generate()
    raw_public = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    x = _b64url(raw_public)
    thumbprint = _b64url(hashlib.sha256(f'{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}'.encode()).digest())
    jwk = {"kty": "OKP", "crv": "Ed25519", "x": x, "kid": thumbprint, "alg": "EdDSA", "use": "sig"}
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return thumbprint, pem, jwk


class SigningKey(msgspec.Struct, frozen=True):
    """One of capreg's signing keys as stored (db.keys): `current` is the key that signs now."""

    kid: str
    private_pem: str
    public_jwk: dict
    current: bool


class Keyring:
    """The signing key and every key that still verifies, loaded from the database."""

    def __init__(self, rows: Sequence[SigningKey]):
        self.public: dict[str, Ed25519PublicKey] = {}
        self.jwks: list[dict] = []
        self.signing_kid: str | None = None
        self._signing_key: Ed25519PrivateKey | None = None
        for row in rows:
            private = serialization.load_pem_private_key(row.private_pem.encode(), password=None)
            assert isinstance(private, Ed25519PrivateKey)
            self.public[row.kid] = private.public_key()
            self.jwks.append(dict(row.public_jwk))
            if row.current and self.signing_kid is None:
                self.signing_kid = row.kid
                self._signing_key = private
        self.loaded_at = time.monotonic()

    def current_signing_key(self) -> tuple[str, Ed25519PrivateKey]:
        """The current key as (kid, private key), for signatures that are not JWTs (the registry's
        card signatures, registry.agents.card_signing)."""
        if self._signing_key is None or self.signing_kid is None:
            raise RuntimeError("no signing key: run capreg migrate first")
        return self.signing_kid, self._signing_key

    def sign_payload(self, payload: bytes, *, typ: str) -> str:
        """A compact EdDSA JWS (RFC 7515) of `payload`, JSON its caller encoded once (the ticket
        path, auth.tickets: the bytes whose length it planned are the bytes signed), with the
        current key. Skips PyJWT's claim handling, which `sign` keeps for everything else."""
        kid, key = self.current_signing_key()
        signing_input = f"{_b64url(jws_header(kid, typ))}.{_b64url(payload)}"
        return f"{signing_input}.{_b64url(key.sign(signing_input.encode()))}"

    def sign(self, claims: dict, *, typ: str) -> str:
        if self._signing_key is None:
            raise RuntimeError("no signing key: run capreg migrate first")
        return jwt.encode(claims, self._signing_key, algorithm="EdDSA", headers={"kid": self.signing_kid, "typ": typ})
