"""`capreg audit verify --url` against answers no honest registry gives, served in-process
(httpx.MockTransport) and signed with a key of the test's own: each is a verdict, never a traceback."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from registry.audit import merkle
from registry.audit.checkpoints import CHECKPOINT_TYP, checkpoint_claims, format_at
from registry.audit.remote_verify import TAMPERED, verify_remote

KID = "hostile-1"
HEAD_HASH = "ab" * 32


def hostile_registry(chain_seq: int) -> httpx.MockTransport:
    """A registry whose signed checkpoint covers `acme`'s head at `chain_seq`, and which exports no
    entry of that chain."""
    key = Ed25519PrivateKey.generate()
    jwk = json.loads(jwt.algorithms.get_default_algorithms()["EdDSA"].to_jwk(key.public_key()))
    jwk.update(kid=KID, alg="EdDSA", use="sig")
    root = merkle.heads_root([("acme", chain_seq, HEAD_HASH)]).hex()
    at = datetime.now(UTC)
    claims = checkpoint_claims(issuer="capreg", seq=1, hash=HEAD_HASH, at=at, root=root, chains=1)
    signature = jwt.encode(claims, key, algorithm="EdDSA", headers={"typ": CHECKPOINT_TYP, "kid": KID})
    proof = {
        "chain": "acme",
        "chainSeq": chain_seq,
        "hash": HEAD_HASH,
        "checkpoint": {
            "seq": 1,
            "hash": HEAD_HASH,
            "at": format_at(at),
            "signature": signature,
            "kid": KID,
            "root": root,
            "chains": 1,
        },
        "auditPath": [],
        "index": 0,
    }

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/audit/proof":
            return httpx.Response(200, json=proof)
        if request.url.path == "/.well-known/jwks.json":
            return httpx.Response(200, json={"keys": [jwk]})
        if request.url.path == "/v1/audit/events":
            return httpx.Response(200, content=b"", headers={"Content-Type": "application/x-ndjson"})
        return httpx.Response(404, json={"detail": "no such route"})

    return httpx.MockTransport(answer)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("with_state", [False, True])
def test_a_signed_head_at_chain_seq_zero_is_tampered(tmp_path, capsys, with_state):
    # No chain has an entry at chainSeq 0: a checkpoint covering one, with no entry exported, is a
    # verdict (mypy found that the verifier's end state was read while no entry had been fed).
    state = tmp_path / "state.json" if with_state else None
    code = verify_remote("http://registry.test", "token", state_file=state, transport=hostile_registry(0))
    assert code == TAMPERED
    assert "chainSeq 0" in capsys.readouterr().out
    assert state is None or not state.exists()
