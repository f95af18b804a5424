"""The grant listing shared by `GET /v1/audit/grants` and `GET /v1/tickets`: one query (`grant_listing`)
with one definition of "active" (db/grants.py), one item shape, one cursor."""

from __future__ import annotations

import re
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from auth.tickets import ID_PATTERN
from db import grants as grant_queries
from db.grants import GrantRow
from registry.core.cursors import decode_cursor, encode_cursor
from registry.core.problems import ErrorItem, invalid_request
from registry.core.wire import Wire

if TYPE_CHECKING:
    from registry.state import Registry

_JTI = re.compile(ID_PATTERN)


class Grant(Wire):
    """A ticket as auditors see it: `actor` minted it (`tenant/sub`) through the chain `act`."""

    jti: str
    actor: str
    on_behalf_of: str | None
    audience: str
    ref: str
    scopes: list[str]
    resources: list[str]
    issued_at: datetime
    expires_at: datetime
    depth: int
    max_depth: int
    parent: str | None
    act: dict
    active: bool


class GrantPage(Wire):
    items: list[Grant]
    next_cursor: str | None


GrantOrder = Literal["issued", "expiry"]


async def grant_listing(
    registry: Registry,
    viewer_tenant: str,
    *,
    active: bool | None,
    actor: str | None,
    skill: str | None,
    scope: str | None,
    limit: int,
    cursor: str | None,
    order: GrantOrder = "issued",
) -> GrantPage:
    """One page of the tickets whose capability tenant or minting caller's tenant is `viewer_tenant`
    (`active` None: both live and inactive ones); 400 for a cursor of another order or registry."""
    rows = await grant_queries.tenant_grants(
        registry.pool,
        viewer_tenant=viewer_tenant,
        active=active,
        actor=actor,
        skill=skill,
        scope=scope,
        after=_grant_position(cursor, order) if cursor else None,
        limit=limit + 1,
        order=order,
        now=registry.clock.now(),
    )
    return _grant_page(rows, limit, order)


def _grant_page(rows: list[GrantRow], limit: int, order: GrantOrder = "issued") -> GrantPage:
    """A page from up to `limit + 1` rows of db.grants.tenant_grants in `order` (the extra one says
    there is more)."""
    items = [
        Grant(
            jti=row.jti,
            actor=row.actor,
            on_behalf_of=row.on_behalf_of,
            audience=row.audience,
            ref=row.ref,
            scopes=list(row.scopes),
            resources=list(row.resources),
            issued_at=row.issued_at,
            expires_at=row.expires_at,
            depth=row.depth,
            max_depth=row.max_depth,
            parent=row.parent_jti,
            act=row.act,
            active=row.active,
        )
        for row in rows[:limit]
    ]
    return GrantPage(items=items, next_cursor=_grant_cursor(items[-1], order) if len(rows) > limit else None)


def _grant_cursor(grant: Grant, order: GrantOrder) -> str:
    # An expiry-order cursor is tagged, so it is never taken for an issued-order one (or vice versa).
    return encode_cursor([grant.issued_at, grant.jti] if order == "issued" else [grant.expires_at, grant.jti, "expiry"])


def _grant_position(cursor: str, order: GrantOrder = "issued") -> tuple[datetime, str]:
    """The (sort key, jti) a cursor of `order` resumes after; 400 for any other string."""
    if order == "issued":
        at, jti = decode_cursor(cursor, tuple[datetime, str])
    else:
        at, jti, _ = decode_cursor(cursor, tuple[datetime, str, Literal["expiry"]])
    if at.tzinfo is None or not _JTI.match(jti):
        raise invalid_request(
            "cursor is not one this registry issued", [ErrorItem(path="cursor", message="invalid cursor")]
        )
    return at, jti
