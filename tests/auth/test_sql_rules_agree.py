"""Two rules exist twice, once as SQL for lists (db.capabilities) and once in Python for rows
already read (issue 19): who may see a record (VISIBLE_TO, auth.policy.can_see) and which version
is in force (IN_FORCE, registry.release.service.in_force). Until each has one spelling, these tests
make PostgreSQL and Python decide every combination of their inputs, and fail on any disagreement."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from auth.policy import can_see
from auth.principal import Caller
from db.capabilities import IN_FORCE, VISIBLE_TO
from registry.release.service import in_force

TENANTS = ("t1", "t2", "t3")


async def test_visibility_is_decided_alike_by_sql_and_policy(db):
    shares = [list(s) for n in range(len(TENANTS) + 1) for s in itertools.combinations(TENANTS, n)]
    cases = [
        (visibility, owner, shared, viewer)
        for visibility in ("public", "tenant")
        for owner in TENANTS
        for shared in shares
        for viewer in (None, *TENANTS)
    ]
    sql = f"""SELECT coalesce({VISIBLE_TO.format(t="$4::text")}, false)
                FROM (SELECT $1::text AS visibility, $2::text AS tenant, $3::text[] AS shared_with) AS a"""
    async with db.acquire() as conn:
        statement = await conn.prepare(sql)
        for visibility, owner, shared, viewer in cases:
            in_sql = await statement.fetchval(visibility, owner, shared, viewer)
            caller = None if viewer is None else Caller(tenant=viewer, sub="r")
            in_policy = can_see(caller, tenant=owner, visibility=visibility, shared_with=shared)
            assert in_sql == in_policy, (visibility, owner, shared, viewer)
    assert len(cases) == 2 * 3 * 8 * 4


async def test_in_force_is_decided_alike_by_sql_and_python(db):
    now = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    moments = (None, now - timedelta(days=1), now - timedelta(microseconds=1), now, now + timedelta(microseconds=1))
    # The database's clock is now() in IN_FORCE; here it is the same instant Python is given.
    sql = f"SELECT {IN_FORCE.replace('now()', '$3::timestamptz')} FROM (SELECT $1::text AS status, $2::timestamptz AS effective_at) AS c"
    assert "$3::timestamptz" in sql
    async with db.acquire() as conn:
        statement = await conn.prepare(sql)
        for status in ("active", "deprecated", "retired", "candidate"):
            for effective_at in moments:
                in_sql = await statement.fetchval(status, effective_at, now)
                in_python = in_force(SimpleNamespace(status=status, effective_at=effective_at), now)
                assert in_sql == in_python, (status, effective_at)
