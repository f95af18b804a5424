"""Search: the engine that proposes ranked candidates (engine), meaning as vectors (embeddings), and
the engine kept current from the change feed in each process (index_sync)."""
