"""A small HTTP client for capreg (used by `capreg register`; usable by agents at startup)."""

from __future__ import annotations

import httpx


class RegistryClient:
    def __init__(self, base_url: str, token: str | None = None, *, timeout: float = 10.0):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout)

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *exc) -> None:
        self._http.close()

    def register(self, tenant: str, agent_id: str, card: bytes) -> httpx.Response:
        """PUT a registration body as is (the server validates it)."""
        return self._http.put(
            f"/v1/agents/{tenant}/{agent_id}", content=card, headers={"Content-Type": "application/json"}
        )

    def discover(self, **query) -> httpx.Response:
        return self._http.get("/v1/capabilities", params=query)
