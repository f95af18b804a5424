"""Readiness: whether this process can serve, that is the database answers and every migration in
db/migrations is applied (`GET /readyz`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from db.migrate import pending_migrations
from registry.core.wire import Wire

if TYPE_CHECKING:
    from registry.state import Registry


class Readiness(Wire):
    status: str
    database: str
    pending_migrations: list[str]


async def readiness(registry: Registry) -> Readiness:
    """The database reached within 2 seconds, and the migrations it has not applied yet."""
    try:
        async with registry.pool.acquire(timeout=2) as conn:
            pending = await pending_migrations(conn)
    except Exception:  # unreachable, whatever the cause: not ready, and the probe says so
        return Readiness(status="unavailable", database="unreachable", pending_migrations=[])
    return Readiness(status="migrations pending" if pending else "ready", database="ok", pending_migrations=pending)
