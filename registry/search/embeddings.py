"""Meaning as vectors, computed in this process: wordllama's bundled model (its wheel carries the
weights and the tokenizer, so nothing is downloaded, ever), truncated to DIM dimensions (the model
is trained so that a prefix of its dimensions is itself an embedding) and normalised, so cosine
similarity is a dot product."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

DIM = 64
# A word the model knows is at most this many pieces of its vocabulary ("invoice": "in" "voice").
KNOWN_PIECES = 3


class Embedder:
    """Texts to unit vectors of `dim` float32s."""

    def __init__(self, dim: int = DIM) -> None:
        # The tokenizer's thread pool keeps per-thread memory (measured: 85 MB with it, 46 MB
        # without, after 100,000 texts) and buys nothing here: texts come a batch at a time.
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        import wordllama  # imported only when meaning is switched on (CAPREG_SEARCH_MEANING)

        # The wheel ships its tokenizer under tokenizers/, where the loader looks in a cache
        # directory, not beside its own weights: the package folder is that cache. Downloads are
        # refused, so a missing file is an error at start-up, not a request to the network.
        package = Path(wordllama.__file__).parent
        self.model = wordllama.WordLlama.load(cache_dir=package, disable_download=True, trunc_dim=dim)
        self.dim = dim

    def known(self, word: str) -> bool:
        """Whether the model has a meaning for `word`: letters only, at most KNOWN_PIECES pieces of
        its vocabulary. Identifiers, codes and gibberish ("zq3fa9b1", "xkcdqwv") are many pieces,
        and their vectors resemble each other's more than anything's meaning."""
        return word.isalpha() and len(self.model.tokenizer.encode(word, add_special_tokens=False).ids) <= KNOWN_PIECES

    def embed(self, texts: list[str]) -> np.ndarray:
        vectors = self.model.embed(texts, norm=True)
        return np.ascontiguousarray(vectors, dtype=np.float32)
