"""The Merkle tree over the audit chains' heads that a checkpoint signs (docs/audit.md, "Checkpoints"):
RFC 6962 section 2.1 hashing, the leaf encoding, inclusion proofs and their verification. Pure: no I/O.

Leaf `i` is the UTF-8 bytes of "{chain}\\n{chainSeq}\\n{hash}" for the `i`-th chain in byte order of
its name; a leaf hashes as SHA-256(0x00 || leaf), a node as SHA-256(0x01 || left || right), the empty
tree as SHA-256(""). The verifier (`root_from_path`) is RFC 9162 section 2.1.3.2, so any RFC 6962
implementation checks the same proofs.

`HeadTree` keeps the tree between checkpoints: given the heads of the next one, it rehashes only the
leaves whose head moved and the nodes above them (k moved of n: k leaf hashes and at most k·log2 n
node hashes), so signing a checkpoint over 10,000 chains when a few moved costs a few dozen hashes,
not 20,000. A new chain shifts the leaves after it (leaves are in byte order of chain), so then every
node is rehashed, but only the new and moved leaves (docs/performance.md, "Checkpoint tree").
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


def leaf_bytes(chain: str, chain_seq: int, hash: str) -> bytes:
    return f"{chain}\n{chain_seq}\n{hash}".encode()


def leaf_hash(leaf: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than n (n > 1)."""
    return 1 << ((n - 1).bit_length() - 1)


def tree_hash(leaves: Sequence[bytes]) -> bytes:
    """MTH(D[n]) over already hashed leaves (`leaf_hash` of each)."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    # Bottom-up: equal to the recursive definition (a lone last node is carried up unchanged).
    level = list(leaves)
    while len(level) > 1:
        paired = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0]


def inclusion_path(leaves: Sequence[bytes], index: int) -> list[bytes]:
    """PATH(index, D[n]) of RFC 6962 section 2.1.1, over hashed leaves."""
    if not 0 <= index < len(leaves):
        raise IndexError(f"leaf {index} is not in a tree of {len(leaves)}")
    path: list[bytes] = []
    lo, hi, m = 0, len(leaves), index
    # Walk down from the root, keeping the sibling subtree of each step; the path lists them leaf first.
    while hi - lo > 1:
        k = _split(hi - lo)
        if m < k:
            path.append(tree_hash(leaves[lo + k : hi]))
            hi = lo + k
        else:
            path.append(tree_hash(leaves[lo : lo + k]))
            lo, m = lo + k, m - k
    path.reverse()
    return path


def tree_levels(leaves: Sequence[bytes]) -> list[list[bytes]]:
    """Every level of the tree, leaves first, root last (a lone last node is carried up unchanged):
    built once per checkpoint, then each inclusion path is read from it in O(log n)."""
    levels = [list(leaves)]
    while len(levels[-1]) > 1:
        levels.append(_parent_level(levels[-1]))
    return levels


def path_from_levels(levels: Sequence[Sequence[bytes]], index: int) -> list[bytes]:
    """The same path as `inclusion_path`, read from `tree_levels`."""
    if not 0 <= index < len(levels[0]):
        raise IndexError(f"leaf {index} is not in a tree of {len(levels[0])}")
    path = []
    for level in levels[:-1]:
        sibling = index ^ 1
        if sibling < len(level):
            path.append(level[sibling])
        index >>= 1
    return path


def root_from_path(index: int, size: int, leaf: bytes, path: Sequence[bytes]) -> bytes | None:
    """The root a proof leads to from hashed `leaf` at `index` in a tree of `size`, or None when the
    proof cannot belong to such a tree (RFC 9162 section 2.1.3.2)."""
    if not 0 <= index < size:
        return None
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return r if sn == 0 else None


def _parent_level(level: Sequence[bytes]) -> list[bytes]:
    paired = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
    if len(level) % 2:
        paired.append(level[-1])  # a lone last node is carried up unchanged
    return paired


class HeadTree:
    """The Merkle tree over chain heads, kept between checkpoints and updated in place.

    Only a cache: `update` compares every head it is given with the one it holds and rehashes what
    differs, so the root it answers is always that of the heads just given, whatever came before.
    Not safe for concurrent use (callers take turns: one per process, under the checkpoint lock).
    """

    def __init__(self) -> None:
        self.chains: list[str] = []  # in byte order: leaf i is chains[i]
        self.heads: dict[str, tuple[int, str]] = {}
        self.index: dict[str, int] = {}
        self.levels: list[list[bytes]] = [[]]
        self.hashed = 0  # leaf and node hashes computed by the last update (for measurements)

    def __len__(self) -> int:
        return len(self.chains)

    def root(self) -> bytes:
        return self.levels[-1][0] if self.chains else hashlib.sha256(b"").digest()

    def path(self, chain: str) -> list[bytes]:
        """The inclusion path of `chain`'s head (KeyError when the tree has no such chain)."""
        return path_from_levels(self.levels, self.index[chain])

    def head_list(self) -> list[tuple[str, int, str]]:
        """The heads in tree order."""
        return [(chain, *self.heads[chain]) for chain in self.chains]

    def copy(self) -> HeadTree:
        """A tree to update while readers still use this one (the hashes are shared, not recomputed)."""
        other = HeadTree()
        other.chains, other.heads, other.index = list(self.chains), dict(self.heads), dict(self.index)
        other.levels = [list(level) for level in self.levels]
        return other

    def update(self, heads: Sequence[tuple[str, int, str]]) -> bytes:
        """Make the tree that of `heads` (chain, chainSeq, hash), one per chain; answers its root."""
        wanted = {chain: (chain_seq, digest) for chain, chain_seq, digest in heads}
        if len(wanted) != len(heads):
            raise ValueError("one head per chain")
        if wanted.keys() == self.heads.keys():
            moved = [chain for chain, head in wanted.items() if self.heads[chain] != head]
            self._move([self.index[chain] for chain in moved], wanted)
        else:
            self._rebuild(wanted)
        return self.root()

    def _move(self, indexes: list[int], wanted: dict[str, tuple[int, str]]) -> None:
        """Rehash the leaves at `indexes` and the nodes above them, level by level."""
        leaves = self.levels[0]
        for i in indexes:
            chain = self.chains[i]
            self.heads[chain] = wanted[chain]
            leaves[i] = leaf_hash(leaf_bytes(chain, *wanted[chain]))
        hashed = len(indexes)
        dirty = set(indexes)
        for depth in range(len(self.levels) - 1):
            below, above = self.levels[depth], self.levels[depth + 1]
            parents = {i >> 1 for i in dirty}
            for p in parents:
                left = 2 * p
                if left + 1 < len(below):
                    above[p] = node_hash(below[left], below[left + 1])
                    hashed += 1
                else:
                    above[p] = below[left]
            dirty = parents
        self.hashed = hashed

    def _rebuild(self, wanted: dict[str, tuple[int, str]]) -> None:
        """Chains came or went: new leaf order, so every node again; a leaf whose head did not move keeps its hash."""
        old_leaves = {chain: self.levels[0][i] for chain, i in self.index.items()}
        chains = sorted(wanted, key=str.encode)
        leaves = []
        hashed = 0
        for chain in chains:
            kept = old_leaves.get(chain)
            if kept is None or self.heads[chain] != wanted[chain]:
                kept = leaf_hash(leaf_bytes(chain, *wanted[chain]))
                hashed += 1
            leaves.append(kept)
        levels = [leaves]
        while len(levels[-1]) > 1:
            levels.append(_parent_level(levels[-1]))
            hashed += len(levels[-2]) // 2
        self.chains, self.heads, self.levels = chains, dict(wanted), levels
        self.index = {chain: n for n, chain in enumerate(chains)}
        self.hashed = hashed


def heads_root(heads: Sequence[tuple[str, int, str]]) -> bytes:
    """The tree hash over chain heads (chain, chainSeq, hash), sorted here by chain in byte order."""
    ordered = sorted(heads, key=lambda head: head[0].encode())
    return tree_hash([leaf_hash(leaf_bytes(*head)) for head in ordered])
