"""Verifying the audit chain: records fed in seq order, in constant memory (`capreg audit verify`, the
audit API's verification, checkpoints). The event and record types and the hash are db.audit_events.
"""

from __future__ import annotations

import msgspec

from db.audit_events import GENESIS_HASH, AuditRecord, record_hash


class ChainBreak(msgspec.Struct):
    seq: int
    problem: str


class ChainVerifier:
    """Checks records fed one at a time in seq order, so a log of any length verifies in constant memory.

    `feed` answers the first break (and keeps answering it); `last_seq`/`last_hash` are the end of the
    verified prefix, to compare with a signed checkpoint once the log is exhausted.
    """

    def __init__(self, *, start_seq: int = 1, start_hash: str = GENESIS_HASH):
        self.last_seq, self.last_hash = start_seq - 1, start_hash
        self.count = 0
        self.broken: ChainBreak | None = None

    def feed(self, record: AuditRecord) -> ChainBreak | None:
        if self.broken is not None:
            return self.broken
        expected_seq = self.last_seq + 1
        if record.seq != expected_seq:
            self.broken = ChainBreak(
                expected_seq, f"expected seq {expected_seq}, found {record.seq} (deleted or reordered)"
            )
        elif record.prev_hash != self.last_hash:
            self.broken = ChainBreak(record.seq, "prevHash does not match the previous event's hash")
        elif record_hash(record) != record.hash:
            self.broken = ChainBreak(record.seq, "hash does not match the event's content (edited)")
        else:
            self.last_seq, self.last_hash = record.seq, record.hash
            self.count += 1
        return self.broken

