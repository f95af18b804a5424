"""Delegation tickets: minting, re-delegation, approvals, introspection, revocation, grants."""
