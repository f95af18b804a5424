"""The one line `capreg audit verify` prints for an intact chain: in words, what was checked and what
that proves, so that "0 checkpoints" never reads as "nothing verified", an empty log never as a
verified one, nor a hash chain alone as proof against a rewrite (docs/audit.md#verification). It
always ends with its caveat: what the check does not prove. Pure: numbers in, a sentence out.
"""

from __future__ import annotations

from collections.abc import Iterable

# What no check against the database alone proves: its keys sign the checkpoints it stores.
OUTSIDE = "keep checkpoints outside the database (--checkpoint FILE)"


def intact_summary(
    events: int,
    head_seq: int,
    checkpoint_seqs: Iterable[int],
    chains: int = 0,
    *,
    last_seq: int | None = None,
    external: int = 0,
) -> str:
    """`events` hashed and linked, in every chain; `head_seq` the head of the single chain of before
    migration 0009, `last_seq` the newest event's seq in any chain (default `head_seq`);
    `checkpoint_seqs` the seqs of the signed checkpoints whose signature and hash matched (the stored
    latest, and the `external` ones given as files); `chains` the tenant chains checked after the
    single chain."""
    last = max(head_seq, last_seq or 0)
    if events == 0:
        return (
            "no events yet: nothing to verify (the audit log is empty; the server signs a checkpoint as soon "
            f"as there are events); caveat: from then on, {OUTSIDE} to show a rewrite of the whole log"
        )
    # seq comes from a sequence: a write that rolls back leaves its number unused. Continuity is each
    # chain's gap-free chain_seq, which the check proves; an unused seq is no missing event.
    unused = last - events
    span = (
        f"{events} events (seq 1 to {last}"
        + (f", {unused} seq number{'s' if unused > 1 else ''} left unused by rolled-back writes" if unused > 0 else "")
        + ")"
    )
    line = (
        f"audit chain intact: {span} re-hashed and each linked to the one before, up to the head row, "
        "so none was altered, reordered or removed"
    )
    if chains:
        line += (
            f" ({chains} tenant chain{'s' if chains != 1 else ''} checked the same way, each from the single chain's head"
            f"{', which is empty' if head_seq == 0 else f' at seq {head_seq}'})"
        )
    covering = sorted({seq for seq in checkpoint_seqs if seq > 0})
    if not covering:
        return (
            line + "; caveat: no signed checkpoint covers an event yet, so a rewrite of the whole log by someone "
            f"with database access would not show: {OUTSIDE}"
        )
    latest = covering[-1]
    named = ", ".join(str(seq) for seq in covering)
    line += (
        f"; the signed checkpoint{'s' if len(covering) > 1 else ''} for seq {named} "
        f"{'verify' if len(covering) > 1 else 'verifies'} against the registry's keys and the log still holds "
        f"the hash signed, so nothing up to seq {latest} was rewritten or cut off since it was signed"
    )
    if last > latest:
        later = f"seq {last}" if last == latest + 1 else f"seq {latest + 1} to {last}"
        line += f" (events at {later} are covered by the chain only, until the next checkpoint)"
    if external:
        return (
            line
            + "; caveat: events after the newest checkpoint kept outside the database are covered by the chain only"
        )
    return (
        line + "; caveat: the checkpoint was read from the database, whose keys sign it, so someone with database "
        f"access could rewrite both: {OUTSIDE}"
    )
