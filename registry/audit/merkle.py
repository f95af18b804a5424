"""The Merkle tree over the audit chains' heads that a checkpoint signs (docs/audit.md, "Checkpoints"):
RFC 6962 section 2.1 hashing, the leaf encoding, inclusion proofs and their verification. Pure: no I/O.

Leaf `i` is the UTF-8 bytes of "{chain}\\n{chainSeq}\\n{hash}" for the `i`-th chain in byte order of
its name; a leaf hashes as SHA-256(0x00 || leaf), a node as SHA-256(0x01 || left || right), the empty
tree as SHA-256(""). The verifier (`root_from_path`) is RFC 9162 section 2.1.3.2, so any RFC 6962
implementation checks the same proofs.
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
        level = levels[-1]
        paired = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        levels.append(paired)
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


def heads_root(heads: Sequence[tuple[str, int, str]]) -> bytes:
    """The tree hash over chain heads (chain, chainSeq, hash), sorted here by chain in byte order."""
    ordered = sorted(heads, key=lambda head: head[0].encode())
    return tree_hash([leaf_hash(leaf_bytes(*head)) for head in ordered])
