"""Signed checkpoints of the audit chain head: what capreg signs and how anyone verifies a checkpoint
with nothing but the registry's JWKS. Pure: no I/O.

A checkpoint says "at time `at`, the audit chains' heads were those whose Merkle tree hash is `root`
(`chains` of them, registry.audit.merkle), the newest entry among them being `seq` with hash `hash`".
Its `signature` is a compact JWS (RFC 7515): header `{"alg": "EdDSA", "typ": "capreg-checkpoint+jwt",
"kid": ...}`, payload `{"iss", "iat", "seq", "hash", "at", "root", "chains"}` with exactly the values
shown beside it (`at` as the string `YYYY-MM-DDTHH:MM:SS.ffffffZ`, UTC). Verifying means: the header
names the checkpoint type and EdDSA, its `kid` is in the JWKS, the signature verifies with that key,
and the signed values equal the outer ones. Checkpoints signed before chains per tenant existed
(migration 0009) have no `root` and `chains`, in the payload or beside it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import jwt

from registry.core.wire import Wire

if TYPE_CHECKING:  # the row type only: this module does no I/O
    from db.checkpoints import StoredCheckpoint

CHECKPOINT_TYP = "capreg-checkpoint+jwt"
_IAT_LEEWAY_SECONDS = 300  # the verifier's clock may be behind the registry's


class Checkpoint(Wire):
    """The chain head signed by the registry (GET /v1/audit/checkpoints/latest)."""

    seq: int
    hash: str
    at: str
    signature: str
    kid: str
    root: str | None = None  # RFC 6962 tree hash over the chain heads (None: signed before migration 0009)
    chains: int | None = None  # the tree's size


class CheckpointInvalid(Exception):
    """The checkpoint is not one the registry signed (or its fields were changed after signing)."""


def format_at(at: datetime) -> str:
    """The one textual form of a checkpoint time: UTC, always with microseconds, `Z`."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def checkpoint_claims(
    *, issuer: str, seq: int, hash: str, at: datetime, root: str | None = None, chains: int | None = None
) -> dict[str, Any]:
    claims = {"iss": issuer, "iat": int(at.timestamp()), "seq": seq, "hash": hash, "at": format_at(at)}
    if root is not None:
        claims.update(root=root, chains=chains)
    return claims


def checkpoint_from_row(row: StoredCheckpoint) -> Checkpoint:
    """A stored checkpoint as served."""
    return Checkpoint(
        seq=row.seq,
        hash=row.hash,
        at=format_at(row.at),
        signature=row.signature,
        kid=row.kid,
        root=row.root,
        chains=row.chains,
    )


def jwks_keys(jwks: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """kid -> public key for the EdDSA keys of a JWKS document (`{"keys": [...]}`) or key list."""
    entries = jwks.get("keys", []) if isinstance(jwks, Mapping) else jwks
    keys = {}
    for entry in entries:
        if entry.get("kty") == "OKP" and entry.get("crv") == "Ed25519" and entry.get("kid"):
            keys[entry["kid"]] = jwt.PyJWK(dict(entry), algorithm="EdDSA").key
    return keys


def verify_checkpoint(checkpoint: Checkpoint, keys: Mapping[str, Any], *, issuer: str | None = None) -> None:
    """Raise CheckpointInvalid unless `checkpoint` was signed by one of `keys` (kid -> public key)
    and its `seq`, `hash` and `at` are the signed ones."""
    try:
        header = jwt.get_unverified_header(checkpoint.signature)
    except jwt.PyJWTError as exc:
        raise CheckpointInvalid(f"signature is not a compact JWS: {exc}") from None
    # Checked before any key is chosen: a token of another type never passes as a checkpoint.
    if header.get("typ") != CHECKPOINT_TYP or header.get("alg") != "EdDSA":
        raise CheckpointInvalid(f"signature header must be typ {CHECKPOINT_TYP}, alg EdDSA")
    key = keys.get(header.get("kid", ""))
    if key is None:
        raise CheckpointInvalid(f"signing key {header.get('kid')!r} is not in the key set")
    try:
        claims = jwt.decode(
            checkpoint.signature,
            key,
            algorithms=["EdDSA"],
            issuer=issuer,
            leeway=_IAT_LEEWAY_SECONDS,
            options={"require": ["iss", "iat", "seq", "hash", "at"], "verify_aud": False},
        )
    except jwt.PyJWTError as exc:
        raise CheckpointInvalid(f"signature does not verify: {exc}") from None
    signed = (claims["seq"], claims["hash"], claims["at"], claims.get("root"), claims.get("chains"))
    if signed != (checkpoint.seq, checkpoint.hash, checkpoint.at, checkpoint.root, checkpoint.chains):
        raise CheckpointInvalid("seq, hash, at, root or chains differ from the signed ones")
    if header.get("kid") != checkpoint.kid:
        raise CheckpointInvalid("kid differs from the signature's key id")
