"""Agents: registration, the agent views and A2A cards, heartbeats."""
