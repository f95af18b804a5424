"""HTTP: (placeholder until its issue lands)."""

ROUTES: list = []
