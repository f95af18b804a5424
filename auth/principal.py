"""The authenticated caller, as every policy check sees it."""

from __future__ import annotations

import msgspec


class Caller(msgspec.Struct, frozen=True, kw_only=True):
    """A verified caller token reduced to what policy decisions need.

    `regions` is None when the token carries no `regions` claim (the caller may
    receive no region-bound data), and a tuple otherwise.
    """

    tenant: str
    sub: str
    scopes: frozenset[str] = frozenset()
    regions: tuple[str, ...] | None = None
    issuer: str = "capreg"

    @property
    def principal(self) -> str:
        """The caller named across tenants, as tickets and audit events name it."""
        return f"{self.tenant}/{self.sub}"

    def holds(self, scope: str) -> bool:
        return scope in self.scopes
