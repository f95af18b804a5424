"""The one line `capreg audit verify` prints for an intact chain: in words, what was checked and what
that proves, so that "0 checkpoints" never reads as "nothing verified" nor a hash chain alone as
proof against a rewrite (docs/audit.md#verification). Pure: numbers in, a sentence out.
"""

from __future__ import annotations

from collections.abc import Iterable


def intact_summary(events: int, head_seq: int, checkpoint_seqs: Iterable[int], chains: int = 0) -> str:
    """`events` hashed and linked up to the head row at `head_seq`; `checkpoint_seqs` the seqs of the
    signed checkpoints whose signature and hash matched (the stored latest, and any given as files);
    `chains` the tenant chains checked after the single chain of before migration 0009."""
    if chains:
        return _intact_summary(events, head_seq, checkpoint_seqs) + (
            f"; {chains} tenant chain{'s' if chains != 1 else ''} checked the same way, each from the single chain's head"
        )
    return _intact_summary(events, head_seq, checkpoint_seqs)


def _intact_summary(events: int, head_seq: int, checkpoint_seqs: Iterable[int]) -> str:
    if events == 0:
        return (
            "audit chain intact: the log is empty (no events yet), so there is nothing to check; "
            "the server signs a checkpoint as soon as there are events"
        )
    span = f"{events} events (seq 1 to {head_seq})" if events == head_seq else f"{events} events up to seq {head_seq}"
    line = (
        f"audit chain intact: {span} re-hashed and each linked to the one before, up to the head row, "
        "so none was altered, reordered or removed"
    )
    covering = sorted({seq for seq in checkpoint_seqs if seq > 0})
    if not covering:
        return (
            line + "; no signed checkpoint covers an event yet, so a rewrite of the whole log by someone "
            "with database access would not show: keep checkpoints outside the database (--checkpoint FILE)"
        )
    latest = covering[-1]
    named = ", ".join(str(seq) for seq in covering)
    line += (
        f"; the signed checkpoint{'s' if len(covering) > 1 else ''} for seq {named} "
        f"{'verify' if len(covering) > 1 else 'verifies'} against the registry's keys and the log still holds "
        f"the hash signed, so nothing up to seq {latest} was rewritten or cut off since it was signed"
    )
    if head_seq > latest:
        later = head_seq - latest
        line += f" ({later} later event{'s are' if later > 1 else ' is'} covered by the chain only, until the next checkpoint)"
    return line
