"""The grant report: who holds which scopes on which capabilities through delegation tickets (read-only
queries on tickets, migration 0002, joined with capability_versions)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import asyncpg
import msgspec

from db.rows import typed_rows
from db.tickets import active as active_at

GRANT_COLUMNS = (
    "t.jti, t.parent_jti, t.ref, t.audience, t.actor, t.on_behalf_of, t.scopes, t.resources, t.depth, "
    "t.max_depth, t.issued_at, t.expires_at, t.act"
)


class GrantRow(msgspec.Struct, frozen=True, gc=False):
    """A ticket as the grant report shows it (GRANT_COLUMNS, in order), with whether it is active."""

    jti: str
    parent_jti: str | None
    ref: str
    audience: str
    actor: str
    on_behalf_of: str | None
    scopes: list[str]
    resources: list[str]
    depth: int
    max_depth: int
    issued_at: datetime
    expires_at: datetime
    act: dict[str, Any]
    active: bool


_ORDER_KEYS = {"issued": "t.issued_at", "expiry": "t.expires_at"}


async def tenant_grants(
    conn: asyncpg.Connection | asyncpg.Pool,
    *,
    viewer_tenant: str,
    active: bool | None = True,
    actor: str | None = None,
    skill: str | None = None,
    scope: str | None = None,
    after: tuple[datetime, str] | None = None,
    limit: int = 100,
    order: Literal["issued", "expiry"] = "issued",
    now: datetime,
) -> list[GrantRow]:
    """One page, in (issued_at, jti) order (`order="expiry"`: (expires_at, jti), soonest first), of
    tickets whose capability tenant or minting caller's tenant is `viewer_tenant`, each with `active`.

    `active` True keeps live grants, False the others (expired, revoked, retired), None both. `actor` is
    a principal `tenant/sub` or a bare `sub` in any tenant.
    """
    params: list[object] = [viewer_tenant]

    def bind(value: object) -> str:
        params.append(value)
        return f"${len(params)}"

    filters = ["(t.tenant = $1 OR t.actor_tenant = $1)"]
    is_active = active_at(f"{bind(now)}::timestamptz")  # at the app's clock, as introspection
    if active is not None:
        filters.append(is_active if active else f"NOT {is_active}")
    if actor is not None:
        filters.append(f"t.actor = {bind(actor)}" if "/" in actor else f"split_part(t.actor, '/', 2) = {bind(actor)}")
    if skill is not None:
        filters.append(f"t.skill_id = {bind(skill)}")
    if scope is not None:
        filters.append(f"{bind(scope)} = ANY (t.scopes)")
    key = _ORDER_KEYS[order]
    if after is not None:
        filters.append(f"({key}, t.jti) > ({bind(after[0])}, {bind(after[1])})")
    rows = await conn.fetch(
        f"""SELECT {GRANT_COLUMNS}, {is_active} AS active
              FROM tickets t
              JOIN capability_versions cv ON cv.tenant = t.tenant AND cv.agent_id = t.agent_id
                                         AND cv.skill_id = t.skill_id AND cv.version = t.version
             WHERE {" AND ".join(filters)}
             ORDER BY {key}, t.jti
             LIMIT {bind(limit)}""",
        *params,
    )
    return typed_rows(GrantRow, rows)
