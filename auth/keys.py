"""capreg's signing keys: creation on first start, rotation, the JWKS, and signing."""

from __future__ import annotations

import base64
import hashlib
import time
from datetime import datetime, timedelta, timezone

import asyncpg
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from db import keys as key_queries


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def new_key() -> tuple[str, str, dict]:
    """A fresh Ed25519 key: (kid, private PEM, public JWK). kid is the RFC 7638 thumbprint."""
    private = Ed25519PrivateKey.generate()
    raw_public = private.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    x = _b64url(raw_public)
    thumbprint = _b64url(hashlib.sha256(f'{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}'.encode()).digest())
    jwk = {"kty": "OKP", "crv": "Ed25519", "x": x, "kid": thumbprint, "alg": "EdDSA", "use": "sig"}
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return thumbprint, pem, jwk


class Keyring:
    """The signing key and every key that still verifies, loaded from the database."""

    def __init__(self, rows: list[asyncpg.Record]):
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
        card signatures, registry.card_signing)."""
        if self._signing_key is None or self.signing_kid is None:
            raise RuntimeError("no signing key: run capreg migrate first")
        return self.signing_kid, self._signing_key

    def sign(self, claims: dict, *, typ: str) -> str:
        if self._signing_key is None:
            raise RuntimeError("no signing key: run capreg migrate first")
        return jwt.encode(
            claims, self._signing_key, algorithm="EdDSA", headers={"kid": self.signing_kid, "typ": typ}
        )


async def ensure_signing_key(conn: asyncpg.Connection) -> None:
    """Create the first signing key unless one exists (safe under concurrent starts)."""
    async with conn.transaction():
        await key_queries.lock_keys(conn)
        if await key_queries.current_key(conn) is None:
            await key_queries.insert_key(conn, *new_key())


async def rotate_key(conn: asyncpg.Connection, keep_verifying_for: timedelta) -> str:
    """Make a new key current; the old one stays published for `keep_verifying_for` and, beyond
    that, until the last ticket it signed has expired (db/keys.py). A zero `keep_verifying_for`
    removes the old key at once, tickets and all."""
    async with conn.transaction():
        await key_queries.lock_keys(conn)
        # Keeping it for no time at all is an emergency removal: its live tickets die with it.
        await key_queries.retire_current(
            conn, datetime.now(timezone.utc) + keep_verifying_for, remove=keep_verifying_for <= timedelta(0)
        )
        kid, pem, jwk = new_key()
        await key_queries.insert_key(conn, kid, pem, jwk)
        return kid


async def load_keyring(conn: asyncpg.Connection | asyncpg.Pool) -> Keyring:
    return Keyring(await key_queries.verifying_keys(conn))
