"""The checkpoint's Merkle tree (registry.audit.merkle) against RFC 6962's recursive definition: every
proof of every leaf of every tree size leads to the root, and any change to a leaf, the index or
the path does not."""

from __future__ import annotations

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from registry.audit.merkle import (
    HeadTree,
    heads_root,
    inclusion_path,
    leaf_bytes,
    leaf_hash,
    path_from_levels,
    root_from_path,
    tree_hash,
    tree_levels,
)


def reference_mth(leaves: list[bytes]) -> bytes:
    """MTH exactly as RFC 6962 section 2.1 writes it (raw leaves)."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return hashlib.sha256(b"\x00" + leaves[0]).digest()
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return hashlib.sha256(b"\x01" + reference_mth(leaves[:k]) + reference_mth(leaves[k:])).digest()


def test_known_vectors():
    # RFC 6962's empty tree and the one-leaf tree of the empty leaf (as in Certificate Transparency's tests).
    assert tree_hash([]).hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert tree_hash([leaf_hash(b"")]).hex() == "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"


def test_the_leaf_encoding_is_the_contracts():
    assert leaf_bytes("acme", 12, "ab" * 32) == b"acme\n12\n" + b"ab" * 32


def test_heads_are_sorted_by_bytes_not_by_locale():
    heads = [("b", 1, "0" * 64), ("B", 2, "1" * 64), ("a.b", 3, "2" * 64)]
    ordered = sorted(heads, key=lambda h: h[0].encode())
    assert [h[0] for h in ordered] == ["B", "a.b", "b"]
    assert heads_root(heads) == reference_mth([leaf_bytes(*h) for h in ordered])


leaves_strategy = st.lists(st.binary(max_size=40), min_size=1, max_size=70)


@settings(max_examples=200)
@given(leaves_strategy)
def test_tree_hash_is_rfc6962(leaves):
    assert tree_hash([leaf_hash(leaf) for leaf in leaves]) == reference_mth(leaves)


@settings(max_examples=60)
@given(leaves_strategy)
def test_every_proof_of_every_index_verifies(leaves):
    hashed = [leaf_hash(leaf) for leaf in leaves]
    root = reference_mth(leaves)
    for index in range(len(leaves)):
        path = inclusion_path(hashed, index)
        assert root_from_path(index, len(leaves), hashed[index], path) == root


@settings(max_examples=200)
@given(leaves_strategy, st.data())
def test_a_changed_leaf_index_size_or_path_fails(leaves, data):
    hashed = [leaf_hash(leaf) for leaf in leaves]
    size = len(leaves)
    root = tree_hash(hashed)
    index = data.draw(st.integers(0, size - 1))
    path = inclusion_path(hashed, index)
    changed = data.draw(st.binary(max_size=40).filter(lambda b: b != leaves[index]))
    assert root_from_path(index, size, leaf_hash(changed), path) != root
    other = data.draw(st.integers(0, size - 1))
    if hashed[other] != hashed[index]:
        assert root_from_path(other, size, hashed[index], path) != root
    # (The size alone is not bound by a path: index 0 of 3 and of 4 take the same steps. The verifier
    # takes the size from the signed checkpoint's `chains`.)
    if path:
        i = data.draw(st.integers(0, len(path) - 1))
        bent = list(path)
        bent[i] = bytes([bent[i][0] ^ 1]) + bent[i][1:]
        assert root_from_path(index, size, hashed[index], bent) != root
        assert root_from_path(index, size, hashed[index], path[:-1]) != root
    assert root_from_path(index, size, hashed[index], [*path, hashed[0]]) != root
    assert root_from_path(size, size, hashed[index], path) is None


@settings(max_examples=100)
@given(leaves_strategy)
def test_paths_read_from_the_cached_levels_are_the_rfc_paths(leaves):
    hashed = [leaf_hash(leaf) for leaf in leaves]
    levels = tree_levels(hashed)
    assert levels[-1] == [tree_hash(hashed)]
    for index in range(len(leaves)):
        assert path_from_levels(levels, index) == inclusion_path(hashed, index)


# Sequences of checkpoints over a changing set of chains: heads move (few or many at once), chains
# appear (anywhere in byte order) and, for the cache's sake, disappear.
_chain_names = st.sampled_from([f"t{n:02d}" for n in range(40)] + ["B", "a.b", "z", "\u00e9", "-registry"])
_head = st.tuples(st.integers(min_value=1, max_value=10**6), st.binary(min_size=32, max_size=32).map(bytes.hex))
_checkpoints = st.lists(st.dictionaries(_chain_names, _head, max_size=45), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(_checkpoints, st.data())
def test_the_kept_tree_equals_one_built_from_scratch_after_any_sequence_of_head_changes(checkpoints, data):
    tree = HeadTree()
    previous: dict = {}
    for heads in checkpoints:
        if previous and data.draw(st.booleans(), label="same chains, some moved"):
            # Keep the chain set, move a random subset: the incremental path (no rebuild).
            moved = data.draw(st.lists(st.sampled_from(sorted(previous)), unique=True), label="moved")
            heads = dict(previous)
            for chain in moved:
                heads[chain] = data.draw(_head, label=f"new head of {chain}")
        listed = [(chain, *head) for chain, head in heads.items()]
        ordered = sorted(listed, key=lambda h: h[0].encode())
        root = tree.update(listed)
        assert root == heads_root(listed) == reference_mth([leaf_bytes(*h) for h in ordered])
        assert tree.head_list() == ordered
        for index, head in enumerate(ordered):
            path = tree.path(head[0])
            assert tree.index[head[0]] == index
            assert root_from_path(index, len(ordered), leaf_hash(leaf_bytes(*head)), path) == root
        previous = heads


def test_moving_one_head_of_ten_thousand_rehashes_a_path_not_the_tree():
    heads = [(f"t{n:05d}", 1, "ab" * 32) for n in range(10_000)]
    tree = HeadTree()
    tree.update(heads)
    assert tree.hashed == 10_000 + 9_999  # the first tree: every leaf and node
    heads[4321] = ("t04321", 2, "cd" * 32)
    assert tree.update(heads) == heads_root(heads)
    assert tree.hashed <= 1 + 14  # the leaf and the nodes above it (depth 14)
    moved = list(range(0, 10_000, 100))
    for n in moved:
        heads[n] = (heads[n][0], 3, "ef" * 32)
    assert tree.update(heads) == heads_root(heads)
    assert tree.hashed <= 100 * 15
    heads.append(("t99999", 1, "01" * 32))  # a new chain: every node again, only one new leaf
    assert tree.update(heads) == heads_root(heads)
    assert tree.hashed == 1 + 10_000
