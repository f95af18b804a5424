"""The checkpoint's Merkle tree (registry.audit.merkle) against RFC 6962's recursive definition: every
proof of every leaf of every tree size leads to the root, and any change to a leaf, the index or
the path does not."""

from __future__ import annotations

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from registry.audit.merkle import (
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
