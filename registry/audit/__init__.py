"""Audit: the event log, the hash chain and its verifier, signed checkpoints."""
