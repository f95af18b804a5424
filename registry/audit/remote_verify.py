"""`capreg audit verify --url URL`: a tenant's auditors verify their own chain over HTTP alone, with an
`audit:read` token (CAPREG_TOKEN) and nothing else trusted but the registry's JWKS (docs/audit.md,
"Verifying your chain remotely").

1. `GET /v1/audit/proof`: the tenant's head (chainSeq, hash) as the latest signed checkpoint covers
   it, the checkpoint, and the RFC 6962 inclusion path of that head in the checkpoint's root;
2. the checkpoint's signature against `GET /.well-known/jwks.json`, and the path leading to its root;
3. every entry of the chain (`GET /v1/audit/events` as NDJSON, the tenant's chain only), from
   chainSeq 1, whose prevHash is the anchor, through the checkpointed head: hash recomputed, link,
   gap-free chainSeq, increasing seq, and the checkpointed head's hash;
4. with `--state FILE`, that the chain only grew since the last run: the head recorded there is
   still at its chainSeq with the same hash, and the anchor is the same. The file is then rewritten
   with the new head.

Exit 0 intact, 1 tampered (the first bad chainSeq named), 2 could not check.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import httpx
import msgspec

from db.audit_events import AuditRecord
from registry.audit import merkle
from registry.audit.checkpoints import Checkpoint, CheckpointInvalid, jwks_keys, verify_checkpoint
from registry.audit.verifier import EntryVerifier

INTACT, TAMPERED, UNCHECKED = 0, 1, 2
NDJSON = "application/x-ndjson"


class Proof(msgspec.Struct, rename="camel"):
    chain: str
    chain_seq: int
    hash: str
    checkpoint: Checkpoint
    audit_path: list[str]
    index: int


Sha256Hex = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]


class State(msgspec.Struct, rename="camel"):
    """What `--state FILE` keeps between runs. A file that no run could have written (a chainSeq
    below 1, a hash that is no SHA-256 hex) cannot be checked against (exit 2), not a tampered chain."""

    url: str
    chain: str
    chain_seq: Annotated[int, msgspec.Meta(ge=1)]
    hash: Sha256Hex
    anchor: Sha256Hex


class Unchecked(Exception):
    """The chain could not be checked (network, token, files): exit 2."""


class Tampered(Exception):
    """The chain does not verify: exit 1, naming the first bad chainSeq."""

    def __init__(self, chain_seq: int | None, problem: str):
        super().__init__(f"broken at chainSeq {chain_seq}: {problem}" if chain_seq is not None else problem)
        self.chain_seq = chain_seq


def verify_remote(
    url: str,
    token: str | None,
    *,
    state_file: Path | None = None,
    progress: Callable[[int, int], None] | None = None,
    transport: httpx.BaseTransport | None = None,
) -> int:
    """Run the check and print its verdict (stdout) or why it could not run (stderr); the exit code."""
    if not token:
        print("capreg audit verify --url: CAPREG_TOKEN must hold an audit:read token", file=sys.stderr)
        return UNCHECKED
    try:
        with httpx.Client(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(30.0),
            transport=transport,
        ) as http:
            summary = _verify(http, url.rstrip("/"), state_file, progress)
    except Unchecked as exc:
        print(f"cannot check the audit chain: {exc}", file=sys.stderr)
        return UNCHECKED
    except httpx.HTTPError as exc:
        print(f"cannot check the audit chain: {url} did not answer ({exc!r})", file=sys.stderr)
        return UNCHECKED
    except Tampered as exc:
        print(f"audit chain {exc}")
        return TAMPERED
    print(summary)
    return INTACT


def _json(response: httpx.Response, what: str):
    if response.status_code != 200:
        try:
            detail = response.json().get("detail") or response.text
        except ValueError:
            detail = response.text
        raise Unchecked(f"{what}: HTTP {response.status_code}: {str(detail)[:300]}")
    return response.content


def _read_state(state_file: Path | None) -> State | None:
    if state_file is None or not state_file.exists():
        return None
    try:
        return msgspec.json.decode(state_file.read_bytes(), type=State)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise Unchecked(f"cannot read the state file {state_file}: {exc}") from None


def _write_state(state_file: Path, state: State) -> None:
    partial = state_file.with_name(state_file.name + ".partial")
    try:
        partial.write_bytes(msgspec.json.encode(state))
        os.replace(partial, state_file)
    except OSError as exc:
        raise Unchecked(f"cannot write the state file {state_file}: {exc}") from None


def _verify(http: httpx.Client, url: str, state_file: Path | None, progress) -> str:
    previous = _read_state(state_file)
    answer = http.get("/v1/audit/proof")
    if answer.status_code == 404:
        if previous is None:
            return "audit chain empty: the tenant's chain has no entries yet"
        raise Tampered(1, f"the chain has no entries, but {state_file} recorded chainSeq {previous.chain_seq}")
    try:
        proof = msgspec.json.decode(_json(answer, "GET /v1/audit/proof"), type=Proof)
        keys = jwks_keys(json.loads(_json(http.get("/.well-known/jwks.json"), "GET /.well-known/jwks.json")))
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
        raise Unchecked(f"the registry's answer is not the documented shape: {exc}") from None
    if previous is not None and previous.chain != proof.chain:
        raise Unchecked(f"{state_file} is the state of chain {previous.chain!r}, the token's is {proof.chain!r}")

    # The checkpoint, then the head's place in its tree: both from the JWKS alone.
    checkpoint = proof.checkpoint
    try:
        verify_checkpoint(checkpoint, keys)
    except CheckpointInvalid as exc:
        raise Tampered(None, f"the checkpoint is not validly signed: {exc}") from None
    if checkpoint.root is None or checkpoint.chains is None:
        raise Tampered(None, "the checkpoint signs no root")
    if proof.chain_seq < 1:  # else no entry is checked against it, and nothing anchors the chain
        raise Tampered(proof.chain_seq, "the signed head is before the chain's first entry (chainSeq 1)")
    leaf = merkle.leaf_hash(merkle.leaf_bytes(proof.chain, proof.chain_seq, proof.hash))
    try:
        path = [bytes.fromhex(node) for node in proof.audit_path]
    except ValueError:
        raise Tampered(proof.chain_seq, "the inclusion path is not hex") from None
    root = merkle.root_from_path(proof.index, checkpoint.chains, leaf, path)
    if root is None or root.hex() != checkpoint.root:
        raise Tampered(proof.chain_seq, "the head is not in the signed checkpoint's tree (the inclusion proof fails)")

    # Every entry from chainSeq 1: hashes, links, and the checkpointed head.
    verifier: EntryVerifier | None = None
    anchor: str | None = None  # the first entry's prevHash, set with `verifier`
    at_previous = None
    with http.stream("GET", "/v1/audit/events", headers={"Accept": NDJSON}) as stream:
        if stream.status_code != 200:
            stream.read()
            _json(stream, "GET /v1/audit/events")
        for line in stream.iter_lines():
            if not line.strip():
                continue
            try:
                record = msgspec.json.decode(line, type=AuditRecord)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise Unchecked(f"an exported event is not the documented shape: {exc}") from None
            if record.chain != proof.chain:
                continue  # events of the old single chain (before chains per tenant) are not this chain's
            if verifier is None:
                anchor = record.prev_hash
                verifier = EntryVerifier(proof.chain, start_hash=anchor)
            breach = verifier.feed(record)
            if breach is not None:
                raise Tampered(breach.chain_seq, breach.problem)
            if record.chain_seq == proof.chain_seq and record.hash != proof.hash:
                raise Tampered(record.chain_seq, "the entry differs from the head the signed checkpoint covers")
            if previous is not None and record.chain_seq == previous.chain_seq:
                at_previous = record.hash
            if progress is not None and verifier.count % 1000 == 0:
                progress(verifier.count, proof.chain_seq)
    verified = verifier.last_chain_seq if verifier is not None else 0
    if verifier is None or anchor is None or verified < proof.chain_seq:
        raise Tampered(
            verified + 1,
            f"the chain ends at chainSeq {verified} but the signed checkpoint covers "
            f"chainSeq {proof.chain_seq} (entries deleted)",
        )
    if previous is not None:
        if anchor != previous.anchor:
            raise Tampered(
                1, f"chainSeq 1 is anchored at {anchor}, the last run saw {previous.anchor} (the chain was replaced)"
            )
        if at_previous != previous.hash:
            raise Tampered(
                previous.chain_seq,
                f"the head recorded in {state_file} (chainSeq {previous.chain_seq}) is no longer "
                "in the chain (it shrank or was rewritten)",
            )
    if state_file is not None:
        _write_state(
            state_file,
            State(
                url=url, chain=proof.chain, chain_seq=verifier.last_chain_seq, hash=verifier.last_hash, anchor=anchor
            ),
        )
    grown = f"; grew from chainSeq {previous.chain_seq}" if previous is not None else ""
    return (
        f"audit chain {proof.chain} intact: {verified} entries from chainSeq 1 (anchor {anchor[:16]}…), head in the "
        f"checkpoint signed at {checkpoint.at} (root {checkpoint.root[:16]}…, {checkpoint.chains} chains){grown}"
    )
