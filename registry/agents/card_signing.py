"""The registry's signature on every A2A card it serves (docs/api.md#signed-cards).

A served card (public or extended) carries one entry in `signatures`: a JWS by capreg's current
key (`alg` EdDSA, `kid`, `jku` the registry's JWKS URL, payload detached) over the RFC 8785 form
of the card without `signatures`. That form is the one a2a-sdk's `create_signature_verifier`
recomputes, built here in the SDK's order from public pieces only (`canonical_card`): the card read
as the `AgentCard` proto message (a2a.types, protobuf's json_format), written back as JSON,
`signatures` dropped, empty values removed (`without_empty_values`: the SDK's rule, written out here
because the SDK keeps its own private), canonicalized by the `rfc8785` package. Private names of
another package are never imported: a rename upstream would stop `capreg serve` from starting
(registry.state imports this module). The SDK's spec-compliance walk is left out: it only logs, and
costs 4 times the rest on a card with schemas. tests/agents/test_signed_cards.py checks byte
equality with the SDK's own canonicalization over generated cards and verification with its
verifier, so an upstream change of the canonical form turns a test red, not a signature invalid.

Signing costs a proto parse, a canonicalization and an Ed25519 signature; a card version is
signed once per process and signing key (`CardSignatures`, keyed by the card's bytes), so the
cached card path and repeated cache rebuilds never sign again. A large card is canonicalized in
a worker process (registry.core.bounded_work), never on the event loop. A card signed by a key that
was later rotated out keeps verifying for as long as that key is in the JWKS (auth.keys).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any

import msgspec
import rfc8785
from a2a.types import AgentCard
from google.protobuf.json_format import MessageToDict, ParseDict, ParseError
from jwt import api_jws

from auth.keys import Keyring
from registry.core import error_codes as codes
from registry.core.bounded_work import WorkFailed, WorkTimedOut, run_bounded
from registry.core.problems import ProblemError

CARD_SIGNATURE_ALG = "EdDSA"
JWKS_PATH = "/.well-known/jwks.json"
DEFAULT_MAX_ENTRIES = 4096
# Cards up to this size (encoded) are canonicalized inline (a few milliseconds); larger ones in a
# worker process.
INLINE_CARD_BYTES = 64 * 1024
# Deepest nesting of objects and arrays a card may have (the outermost object at 1): a2a-sdk's
# verifier refuses deeper cards (its MAX_DEPTH), so signing one would only produce a signature no
# client can check; and the bound keeps the recursive passes below off the interpreter's stack limit
# (`AgentExtension.params` is a Struct, nested as deep as a registrant likes).
MAX_CARD_DEPTH = 128

_encoder = msgspec.json.Encoder()


class CardNotCanonical(ValueError):
    """The card has no A2A canonical form: not an AgentCard message, or no RFC 8785 form."""


def jwks_url(registry_url: str) -> str:
    """The `jku` of the registry's signatures: its JWKS under the registry's own URL."""
    return registry_url.rstrip("/") + JWKS_PATH


def without_empty_values(value: Any, depth: int = 1) -> Any:
    """`value` with empty values removed at every level, or None when it is itself empty: the rule
    a2a-sdk's verifier applies before canonicalizing. Empty means "", [], {}, null, or a list or
    object left empty once its own empty values are gone; false and 0 are kept. Raises
    CardNotCanonical past MAX_CARD_DEPTH."""
    if isinstance(value, dict | list) and depth > MAX_CARD_DEPTH:
        raise CardNotCanonical(f"nesting exceeds the maximum depth of {MAX_CARD_DEPTH}")
    if isinstance(value, dict):
        kept = {
            key: clean for key, item in value.items() if (clean := without_empty_values(item, depth + 1)) is not None
        }
        return kept or None
    if isinstance(value, list):
        items = [clean for item in value if (clean := without_empty_values(item, depth + 1)) is not None]
        return items or None
    if isinstance(value, str) and not value:
        return None
    return value


def canonical_card(card: dict[str, Any]) -> bytes:
    """The bytes an A2A card signature covers, as a2a-sdk's verifier computes them (module
    docstring); raises CardNotCanonical. Pure CPU."""
    try:
        message = ParseDict(card, AgentCard())
        as_json = MessageToDict(message)
        as_json.pop("signatures", None)
        return rfc8785.dumps(without_empty_values(as_json))
    except (ParseError, rfc8785.CanonicalizationError, TypeError, ValueError, RecursionError) as exc:
        raise CardNotCanonical(str(exc)[:300] or type(exc).__name__) from None


def canonical_card_outcome(card: dict[str, Any]) -> bytes | str:
    """`canonical_card`, its refusal returned as text (to cross a process boundary)."""
    try:
        return canonical_card(card)
    except CardNotCanonical as exc:
        return str(exc)


def detached_signature(payload: bytes, *, kid: str, private_key: Any, jku: str) -> dict[str, str]:
    """A detached JWS over `payload` as A2A's AgentCardSignature `{"protected", "signature"}`.
    `alg` is named explicitly (a2a-sdk's own signer falls back to HS256 without one)."""
    compact = api_jws.encode(
        payload, private_key, algorithm=CARD_SIGNATURE_ALG, headers={"kid": kid, "jku": jku, "typ": "JOSE"}
    )
    protected, _, signature = compact.split(".")
    return {"protected": protected, "signature": signature}


class CardSignatures:
    """Signatures of card versions already signed in this process, per (key, jku, card bytes).

    The key is the card's own encoded bytes (hashed): a card that changes in any way is a new
    entry, so a signature can never be attached to a card it does not cover. Bounded: oldest out.
    """

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES):
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[str, str, bytes], dict[str, str]] = OrderedDict()
        self.signed = 0  # signatures computed rather than found here (tests, /metrics-free counting)

    def __len__(self) -> int:
        return len(self._entries)

    async def sign(self, card: dict[str, Any], keyring: Keyring, *, jku: str) -> dict[str, Any]:
        """`card` with the registry's signature as its only `signatures` entry."""
        unsigned = {key: value for key, value in card.items() if key != "signatures"}
        kid, private_key = keyring.current_signing_key()
        encoded = _encoder.encode(unsigned)
        key = (kid, jku, hashlib.sha256(encoded).digest())
        signature = self._entries.get(key)
        if signature is not None:
            self._entries.move_to_end(key)
            return unsigned | {"signatures": [signature]}
        payload = await _canonical(unsigned, inline=len(encoded) <= INLINE_CARD_BYTES)
        signature = detached_signature(payload, kid=kid, private_key=private_key, jku=jku)
        self.signed += 1
        self._entries[key] = signature
        if len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        return unsigned | {"signatures": [signature]}


async def _canonical(card: dict[str, Any], *, inline: bool) -> bytes:
    """`canonical_card`, in a worker process unless `inline`. Registration checks that the stored
    card has a canonical form (registry.agents.registration), so a failure here is a card stored before
    that check or a worker that died: 503, and the agent's next registration is refused or fixes it."""
    try:
        outcome = canonical_card_outcome(card) if inline else await run_bounded(canonical_card_outcome, card)
    except (WorkTimedOut, WorkFailed) as exc:
        outcome = str(exc)
    if isinstance(outcome, str):
        raise ProblemError(
            codes.RETRYABLE_UNAVAILABLE, f"the card could not be signed: {outcome}", headers={"Retry-After": "2"}
        )
    return outcome
