"""Verifying audit chains: records fed in order, in constant memory (`capreg audit verify`, local and
remote, the audit API's verification, checkpoints). `ChainVerifier` checks the old single chain
(before migration 0009) in seq order, `EntryVerifier` one tenant's chain in chainSeq order. The event
and record types and the hash are db.audit_events. Pure: no I/O.
"""

from __future__ import annotations

import msgspec

from db.audit_events import GENESIS_HASH, AuditRecord, record_hash, row_entry_hash


class ChainBreak(msgspec.Struct):
    seq: int | None  # the stored seq of the first bad entry (None when it is missing altogether)
    problem: str
    chain: str | None = None  # None: the old single chain
    chain_seq: int | None = None

    def describe(self) -> str:
        if self.chain is None:
            return f"audit chain broken at seq {self.seq}: {self.problem}"
        at = f" (seq {self.seq})" if self.seq is not None else ""
        return f"audit chain {self.chain} broken at chainSeq {self.chain_seq}{at}: {self.problem}"


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


class EntryVerifier:
    """Checks one chain's entries fed in chainSeq order from `start_chain_seq`, whose prevHash must be
    `start_hash` (the anchor for chainSeq 1: the old single chain's head): gap-free chainSeq, links,
    seq increasing, the chain named, and each hash recomputed from the content."""

    def __init__(self, chain: str, *, start_chain_seq: int = 1, start_hash: str = GENESIS_HASH, last_seq: int = 0):
        self.chain = chain
        self.last_chain_seq, self.last_hash, self.last_seq = start_chain_seq - 1, start_hash, last_seq
        self.count = 0
        self.broken: ChainBreak | None = None

    def _break(self, record: AuditRecord, chain_seq: int, problem: str) -> ChainBreak:
        self.broken = ChainBreak(record.seq, problem, chain=self.chain, chain_seq=chain_seq)
        return self.broken

    def feed(self, record: AuditRecord) -> ChainBreak | None:
        if self.broken is not None:
            return self.broken
        expected = self.last_chain_seq + 1
        if record.chain != self.chain:
            return self._break(
                record, expected, f"an entry of chain {record.chain!r} where {self.chain!r} was expected"
            )
        if record.chain_seq != expected:
            return self._break(
                record, expected, f"expected chainSeq {expected}, found {record.chain_seq} (deleted or reordered)"
            )
        if record.prev_hash != self.last_hash:
            return self._break(record, expected, "prevHash does not match the previous entry's hash")
        if record.seq <= self.last_seq:
            return self._break(
                record, expected, f"seq {record.seq} is not after the previous entry's seq {self.last_seq}"
            )
        if record_hash(record) != record.hash:
            return self._break(record, expected, "hash does not match the entry's content (edited)")
        self.last_chain_seq, self.last_hash, self.last_seq = expected, record.hash, record.seq
        self.count += 1
        return None

    def feed_rows(self, rows) -> ChainBreak | None:
        """Feed stored rows (db.audit.AUDIT_COLUMNS order) in bulk: the same checks as `feed`, on the
        columns directly; the first row failing one is fed as a record, which names the problem."""
        if self.broken is not None:
            return self.broken
        chain, chain_seq, last_hash, last_seq = self.chain, self.last_chain_seq, self.last_hash, self.last_seq
        start = chain_seq
        for row in rows:
            chain_seq += 1
            if (
                row[16] != chain
                or row[17] != chain_seq
                or row[12] != last_hash
                or row[0] <= last_seq
                or row_entry_hash(row) != row[13]
            ):
                self.last_chain_seq, self.last_hash, self.last_seq = chain_seq - 1, last_hash, last_seq
                self.count += chain_seq - 1 - start
                return self.feed(AuditRecord(**dict(row)))
            last_hash, last_seq = row[13], row[0]
        self.count += chain_seq - start
        self.last_chain_seq, self.last_hash, self.last_seq = chain_seq, last_hash, last_seq
        return None

    def feed_all(self, records: list[AuditRecord]) -> ChainBreak | None:
        """Feed a batch (run off the event loop by the server: hashing is CPU work)."""
        for record in records:
            if self.feed(record) is not None:
                break
        return self.broken
