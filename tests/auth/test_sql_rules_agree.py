"""The rules over one row (auth.policy.VISIBLE, IN_FORCE, EFFECTIVE, NOT_WITHDRAWN) and the order of
a skill's versions (LATEST_ORDER) are written once and read two ways (auth.predicates): rendered as
SQL for the queries that list rows, evaluated in Python on rows already read. These tests make
PostgreSQL and Python decide every combination of the rules' inputs, in the SQL the queries actually
use (db.capabilities), random expressions of the little language itself (missing values included)
and random sets of versions, and fail on any disagreement."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from auth import predicates as p
from auth.policy import EFFECTIVE, IN_FORCE, LATEST_ORDER, NOT_WITHDRAWN, VISIBLE, can_see
from auth.principal import Caller
from db.capabilities import LATEST_ORDER as LATEST_ORDER_SQL
from db.capabilities import in_force, is_latest, latest_in_force, refresh_latest, visible_agents_filter
from registry.versions.semver import Version

TENANTS = ("t1", "t2", "t3")
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
MOMENTS = (None, NOW - timedelta(days=1), NOW - timedelta(microseconds=1), NOW, NOW + timedelta(microseconds=1))
STATUSES = ("active", "deprecated", "retired", "candidate")


def _drawn(strategy: st.SearchStrategy, examples: int) -> list:
    """`examples` values drawn by hypothesis up front, for a test that then asks the database about
    each (hypothesis' own runner cannot await)."""
    cases: list = []

    @settings(max_examples=examples, deadline=None, database=None)
    @given(strategy)
    def collect(value):
        cases.append(value)

    collect()
    return cases


async def test_visibility_is_decided_alike_by_sql_and_policy(db):
    shares = [list(s) for n in range(len(TENANTS) + 1) for s in itertools.combinations(TENANTS, n)]
    cases = [
        (visibility, owner, shared, viewer)
        for visibility in ("public", "tenant")
        for owner in TENANTS
        for shared in shares
        for viewer in (None, *TENANTS)
    ]
    rows = "(SELECT $1::text AS visibility, $2::text AS tenant, $3::text[] AS shared_with) AS a"
    async with db.acquire() as conn:
        # the viewer bound (NULL for anonymous, as the change feed binds it) and folded at render time
        bound = await conn.prepare(f"SELECT coalesce({VISIBLE.sql('a', viewer='$4')}, false) FROM {rows}")
        for visibility, owner, shared, viewer in cases:
            in_sql = await bound.fetchval(visibility, owner, shared, viewer)
            params: list = []

            def bind(value, params=params):
                params.append(value)
                return f"${3 + len(params)}"

            condition = visible_agents_filter(viewer, bind)
            folded = await conn.fetchval(
                f"SELECT coalesce({condition}, false) FROM {rows}", visibility, owner, shared, *params
            )
            caller = None if viewer is None else Caller(tenant=viewer, sub="r")
            in_policy = can_see(caller, tenant=owner, visibility=visibility, shared_with=shared)
            assert in_sql == folded == in_policy, (visibility, owner, shared, viewer)
    assert len(cases) == 2 * 3 * 8 * 4


async def test_in_force_is_decided_alike_by_sql_and_python(db):
    rows = "(SELECT $1::text AS status, $2::timestamptz AS effective_at) AS c"
    sql = (
        f"SELECT coalesce({in_force('c', '$3')}, false), coalesce({EFFECTIVE.sql('c', now='$3')}, false),"
        f" coalesce({NOT_WITHDRAWN.sql('c')}, false) FROM {rows}"
    )
    async with db.acquire() as conn:
        statement = await conn.prepare(sql)
        for status in STATUSES:
            for effective_at in MOMENTS:
                in_sql = tuple(await statement.fetchrow(status, effective_at, NOW))
                row = SimpleNamespace(status=status, effective_at=effective_at)
                in_python = (IN_FORCE.holds(row, now=NOW), EFFECTIVE.holds(row, now=NOW), NOT_WITHDRAWN.holds(row))
                assert in_sql == in_python, (status, effective_at)


# Random expressions of the little language over a row of nullable fields, against random rows.
_TEXTS = st.sampled_from(["a", "b", "public", "it's"]) | st.none()
_TIMES = st.sampled_from(MOMENTS)
_ARRAYS = st.none() | st.lists(st.sampled_from(["a", "b", "public"]), max_size=3)
_PARAMS = {"viewer": p.Param("viewer", "text"), "now": p.Param("now", "timestamptz")}


def _leaves() -> st.SearchStrategy[p.Expr]:
    text = st.sampled_from([p.Field("s"), p.Field("u"), _PARAMS["viewer"]]) | st.sampled_from(["a", "b", "public"])
    time = st.sampled_from([p.Field("t"), _PARAMS["now"]])
    # text is compared for equality only (its order is the database's collation, not Python's)
    return st.one_of(
        st.builds(p.Compare, st.sampled_from(["=", "<>"]), text, text),
        st.builds(p.Compare, st.sampled_from(["=", "<>", "<=", "<"]), time, time),
        st.builds(p.Member, text, st.just(p.Field("arr"))),
        st.builds(p.IsNull, st.sampled_from([p.Field("s"), p.Field("t"), p.Field("arr")])),
    )


_EXPRS = st.recursive(
    _leaves(),
    lambda inner: (
        st.builds(lambda parts: p.AllOf(tuple(parts)), st.lists(inner, min_size=1, max_size=3))
        | st.builds(lambda parts: p.AnyOf(tuple(parts)), st.lists(inner, min_size=1, max_size=3))
    ),
    max_leaves=8,
)
_ROWS = st.fixed_dictionaries({"s": _TEXTS, "u": _TEXTS, "t": _TIMES, "arr": _ARRAYS})


async def test_random_rules_are_decided_alike_by_sql_and_python(db):
    cases = _drawn(st.tuples(_EXPRS, _ROWS, _TEXTS, st.sampled_from(MOMENTS[1:])), 300)
    # the parameters are columns of the row too, so a part folded away takes no bound argument with it
    rows = (
        "(SELECT $1::text AS s, $2::text AS u, $3::timestamptz AS t, $4::text[] AS arr,"
        " $5::text AS viewer, $6::timestamptz AS now) AS r"
    )
    async with db.acquire() as conn:
        for expr, row, viewer, now in cases:
            rule = p.Rule(expr)
            values = {"viewer": viewer, "now": now}
            args = [row["s"], row["u"], row["t"], row["arr"], viewer, now]
            # every parameter bound (a NULL viewer included), and a NULL viewer folded out when rendering
            bound = {name: f"r.{name}" for name in rule.params}
            folded = {name: None if values[name] is None else f"r.{name}" for name in rule.params}
            in_sql = await conn.fetchval(f"SELECT coalesce({rule.sql('r', **bound)}, false) FROM {rows}", *args)
            in_folded = await conn.fetchval(f"SELECT coalesce({rule.sql('r', **folded)}, false) FROM {rows}", *args)
            in_python = rule.holds(row, **{name: values[name] for name in rule.params})
            assert in_sql == in_folded == in_python, (expr, row, viewer, now)


_VERSIONS = st.builds(
    lambda core, pre, build: core + (f"-{pre}" if pre else "") + (f"+{build}" if build else ""),
    st.sampled_from(["0.9.0", "1.0.0", "1.0.1", "1.10.0", "2.0.0"]),
    st.sampled_from(["", "rc.1", "rc.2", "alpha", "1", "alpha.beta"]),
    st.sampled_from(["", "a", "b", "B", "build.7"]),
)


async def test_latest_order_is_decided_alike_by_sql_and_python(db):
    """LATEST_ORDER (auth.policy) as db.capabilities sorts by it and as release picks `latest` by it,
    over the column types it sorts in the database (version_key is C-collated, migration 0001)."""
    cases = _drawn(st.lists(_VERSIONS, min_size=1, max_size=8, unique=True), 150)
    async with db.acquire() as conn, conn.transaction():
        await conn.execute(
            'CREATE TEMP TABLE latest_case (prerelease boolean NOT NULL, version_key text COLLATE "C" NOT NULL,'
            " version text NOT NULL) ON COMMIT DROP"
        )
        for versions in cases:
            rows = [
                {"prerelease": Version.parse(v).is_prerelease, "version_key": Version.parse(v).sort_key(), "version": v}
                for v in versions
            ]
            await conn.execute("TRUNCATE latest_case")
            await conn.executemany("INSERT INTO latest_case VALUES ($1, $2, $3)", [tuple(r.values()) for r in rows])
            in_sql = await conn.fetch(f"SELECT c.version FROM latest_case c ORDER BY {LATEST_ORDER_SQL}")
            assert LATEST_ORDER.first(rows)["version"] == in_sql[0]["version"], versions
            assert [r["version"] for r in LATEST_ORDER.sorted(rows)] == [r["version"] for r in in_sql], versions
            before = await conn.fetch(
                f"SELECT n_c.version AS a, c.version AS b, {LATEST_ORDER.before_sql('n_c', 'c')} AS before"
                " FROM latest_case n_c CROSS JOIN latest_case c"
            )
            position = {r["version"]: i for i, r in enumerate(in_sql)}
            for pair in before:
                assert pair["before"] is (position[pair["a"]] < position[pair["b"]]), (versions, pair)


async def test_the_latest_marker_is_what_the_policy_names(db):
    """db.capabilities.refresh_latest (the one place "latest" is decided) against auth.policy, over
    random versions of two skills: statuses, effective moments on both sides of `now`, pre-releases
    and builds. The rows it marks are, per skill, the first version in LATEST_ORDER of those
    IN_FORCE at `now`, and nothing else; and the readers' condition on the marker
    (latest_in_force in SQL, is_latest in Python) names the same rows."""
    moments = (None, NOW - timedelta(days=1), NOW, NOW + timedelta(microseconds=1), NOW + timedelta(hours=1))
    version = st.tuples(st.sampled_from(["s1", "s2"]), _VERSIONS, st.sampled_from(STATUSES), st.sampled_from(moments))
    cases = _drawn(st.lists(version, min_size=1, max_size=8, unique_by=lambda v: (v[0], v[1])), 200)
    async with db.acquire() as conn, conn.transaction():
        # A temporary table of the marker's columns, found first on the search path: the refresh's
        # own statement runs on it unchanged.
        await conn.execute(
            "CREATE TEMP TABLE capability_versions (tenant text, agent_id text, skill_id text, version text,"
            ' version_key text COLLATE "C", prerelease boolean, status text, effective_at timestamptz,'
            " latest boolean NOT NULL DEFAULT false) ON COMMIT DROP"
        )
        for versions in cases:
            rows = [
                {
                    "tenant": "t1",
                    "agent_id": "a1",
                    "skill_id": skill,
                    "version": v,
                    "version_key": Version.parse(v).sort_key(),
                    "prerelease": Version.parse(v).is_prerelease,
                    "status": status,
                    "effective_at": at,
                }
                for skill, v, status, at in versions
            ]
            await conn.execute("TRUNCATE capability_versions")
            await conn.executemany(
                "INSERT INTO capability_versions VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                [tuple(r.values()) for r in rows],
            )
            await refresh_latest(conn, [("t1", "a1", "s1"), ("t1", "a1", "s2")], now=NOW, agents_locked=True)
            stored = await conn.fetch(
                f"SELECT c.*, {latest_in_force('c')} AS read_as_latest FROM capability_versions c"
            )
            expected = set()
            for skill in ("s1", "s2"):
                first = LATEST_ORDER.first(r for r in rows if r["skill_id"] == skill and IN_FORCE.holds(r, now=NOW))
                if first is not None:
                    expected.add((skill, first["version"]))
            assert {(r["skill_id"], r["version"]) for r in stored if r["latest"]} == expected, versions
            assert {(r["skill_id"], r["version"]) for r in stored if r["read_as_latest"]} == expected, versions
            # is_latest reads a row Struct's attributes (db.capabilities.VersionRow): its marker and status.
            marked = [r for r in stored if is_latest(SimpleNamespace(latest=r["latest"], status=r["status"]))]
            assert {(r["skill_id"], r["version"]) for r in marked} == expected, versions
