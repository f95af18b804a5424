"""capreg's signing keys, pure: a new key, the keyring (every key that still verifies, the JWKS,
signing). Keeping them in the database is registry/core/signing_keys.py."""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Mapping, Sequence
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


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


class Keyring:
    """The signing key and every key that still verifies, loaded from the database."""

    def __init__(self, rows: Sequence[Mapping[str, Any]]):
        self.public: dict[str, Ed25519PublicKey] = {}
        self.jwks: list[dict] = []
        self.signing_kid: str | None = None
        self._signing_key: Ed25519PrivateKey | None = None
        for row in rows:
            private = serialization.load_pem_private_key(row["private_pem"].encode(), password=None)
            assert isinstance(private, Ed25519PrivateKey)
            self.public[row["kid"]] = private.public_key()
            self.jwks.append(dict(row["public_jwk"]))
            if row["current"] and self.signing_kid is None:
                self.signing_kid = row["kid"]
                self._signing_key = private
        self.loaded_at = time.monotonic()

    def current_signing_key(self) -> tuple[str, Ed25519PrivateKey]:
        """The current key as (kid, private key), for signatures that are not JWTs (the registry's
        card signatures, registry.agents.card_signing)."""
        if self._signing_key is None or self.signing_kid is None:
            raise RuntimeError("no signing key: run capreg migrate first")
        return self.signing_kid, self._signing_key

    def sign(self, claims: dict, *, typ: str) -> str:
        if self._signing_key is None:
            raise RuntimeError("no signing key: run capreg migrate first")
        return jwt.encode(claims, self._signing_key, algorithm="EdDSA", headers={"kid": self.signing_kid, "typ": typ})
