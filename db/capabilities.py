"""Queries on capability_versions: publishing, lookups by agent and skill, and discovery."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from auth.policy import IN_FORCE as IN_FORCE_RULE
from auth.policy import LATEST_ORDER as LATEST_ORDER_RULE
from auth.policy import NOT_WITHDRAWN as NOT_WITHDRAWN_RULE
from auth.policy import VISIBLE
from db.agents import HEALTH_SQL, LIVE_INSTANCES_SQL, lock_agent

PUBLIC_COLUMNS = (
    "c.tenant, c.agent_id, c.skill_id, c.version, c.version_key, c.prerelease, c.name, c.description, c.tags, "
    "c.scopes, c.side_effect, c.requires_approval, c.data_regions, c.slo, c.status, c.sunset_at, "
    "c.deprecation_message, c.effective_at, c.published_at, c.updated_at"
)
# The fixtures themselves (up to 100 of 64 KiB) are read only for the version released (`fixtures_of`).
DETAIL_COLUMNS = (
    PUBLIC_COLUMNS
    + ", c.examples, c.input_schema, c.output_schema, c.input_modes, c.output_modes, c.fixture_count, c.baseline"
)

# Discovery, cards, `latest` and ranges show what is in force now (auth.policy.IN_FORCE, the one
# definition, rendered here), by the app's clock: every query is given its `now` as a bound
# parameter, the moment the same request decides by in Python (release decides cached rows).
# Precedence among a skill's versions (auth.policy.LATEST_ORDER, rendered): the latest version of a
# skill is its first in-force version in this order, and every path names the same one.
LATEST_ORDER = LATEST_ORDER_RULE.sql("c")
# When the agent's lease figures would next change by themselves: its first live lease lapsing
# (liveInstances drops; health flips at the last one). Cached pages end there. Leases are timed by
# the database's clock (heartbeats set expires_at from now()), not the app's.
LEASE_UNTIL_SQL = """(SELECT min(i.expires_at) FROM agent_instances i
                        WHERE i.tenant = a.tenant AND i.agent_id = a.agent_id AND i.expires_at > now())"""


def in_force(alias: str, now: str) -> str:
    """auth.policy.IN_FORCE of the version row `alias`, at the moment bound as placeholder `now`."""
    return IN_FORCE_RULE.sql(alias, now=now)


def not_withdrawn(alias: str) -> str:
    """auth.policy.NOT_WITHDRAWN of the version row `alias` (in force now or once effective)."""
    return NOT_WITHDRAWN_RULE.sql(alias)


def visible_to(alias: str, viewer: str | None) -> str:
    """auth.policy.VISIBLE of the agent row `alias`, for the viewer bound as placeholder `viewer`
    (None: anonymous, public records only)."""
    return VISIBLE.sql(alias, viewer=viewer)


# The latest marker (migration 0012): a maintained hint that lets a search read "the latest
# in-force version of each skill" from an index instead of choosing it per match. It is derived
# from auth.policy.IN_FORCE and LATEST_ORDER above (refresh_latest) and never replaces them: rows marked are
# every not-withdrawn version that no in-force version precedes, i.e. the latest in force now and
# the newer versions whose effectiveAt is still to come, and `latest_until` is when a marked row
# may stop being the latest by time alone (the earliest effectiveAt of a marked version before
# it; NULL: never). Writes that change what is in force (publishing, retiring, releasing a
# candidate) refresh the skill under the agent's lock; the clock needs no write: past
# `latest_until` the query checks the newer marked versions itself (latest_in_force). A sunset
# date passing changes nothing here: a deprecated version stays in force until it is retired.
# The writer's clock and a reader's (another replica's) may differ a little: a refresh counts a
# version as in force only once it has been effective for CLOCK_SKEW_MARGIN, so a reader whose clock
# is behind still finds its latest version marked (marking more is safe: `latest_until` covers it).
CLOCK_SKEW_MARGIN = timedelta(minutes=5)


def latest_in_force(alias: str, now: str) -> str:
    """The SQL condition: version row `alias` is the latest in-force version of its skill at the
    moment bound as placeholder `now`."""
    n = "n_" + alias
    return f"""({alias}.latest AND {in_force(alias, now)}
        AND ({alias}.latest_until IS NULL OR {alias}.latest_until > {now}::timestamptz
             OR NOT EXISTS (SELECT 1 FROM capability_versions {n}
                             WHERE {n}.tenant = {alias}.tenant AND {n}.agent_id = {alias}.agent_id
                               AND {n}.skill_id = {alias}.skill_id AND {n}.latest AND {in_force(n, now)}
                               AND {LATEST_ORDER_RULE.before_sql(n, alias)})))"""


def latest_marks(rows: Sequence[Mapping[str, Any]], *, now: datetime) -> list[tuple[bool, datetime | None]]:
    """(latest, latest_until) of each of `rows` as refresh_latest derives them, in Python: versions of
    one or more skills (every stored one that is not retired, and the new ones), the same rules read
    the other way (auth.policy NOT_WITHDRAWN, IN_FORCE at now less CLOCK_SKEW_MARGIN, LATEST_ORDER).
    New rows are inserted with it (insert_versions), so that the refresh after them, which stays the
    authority, finds them right and writes nothing: a row written twice is two tuples, with every
    index entry of the second (two GIN indexes among them) written again."""
    settled = now - CLOCK_SKEW_MARGIN
    marks: list[tuple[bool, datetime | None]] = [(False, None)] * len(rows)
    skills: dict[tuple[str, str, str], list[int]] = {}
    for index, row in enumerate(rows):
        skills.setdefault((row["tenant"], row["agent_id"], row["skill_id"]), []).append(index)
    for indexes in skills.values():
        in_force_before, next_effective = 0, None
        for row in LATEST_ORDER_RULE.sorted([{**rows[i], "_index": i} for i in indexes]):
            live = NOT_WITHDRAWN_RULE.holds(row)
            if live and in_force_before == 0:
                marks[row["_index"]] = (True, next_effective)
            if IN_FORCE_RULE.holds(row, now=settled):
                in_force_before += 1
            if live and row["effective_at"] is not None:
                next_effective = (
                    row["effective_at"] if next_effective is None else min(next_effective, row["effective_at"])
                )
    return marks


def _refresh_latest_sql(keys: str, settled: str) -> str:
    """One window pass over the skills' versions in LATEST_ORDER (`keys`: a condition on `c`;
    `settled`: the placeholder of the moment CLOCK_SKEW_MARGIN before now)."""
    return f"""
        WITH ordered AS MATERIALIZED (
            SELECT c.tenant, c.agent_id, c.skill_id, c.version, ({not_withdrawn("c")}) AS live,
                   count(*) FILTER (WHERE {in_force("c", settled)}) OVER before AS in_force_before,
                   min(c.effective_at) FILTER (WHERE {not_withdrawn("c")}) OVER before AS next_effective
              FROM capability_versions c
             WHERE {keys}
            WINDOW before AS (PARTITION BY c.tenant, c.agent_id, c.skill_id ORDER BY {LATEST_ORDER}
                              ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)),
        target AS (
            SELECT o.tenant, o.agent_id, o.skill_id, o.version, o.live AND o.in_force_before = 0 AS latest,
                   CASE WHEN o.live AND o.in_force_before = 0 THEN o.next_effective END AS latest_until
              FROM ordered o)
        UPDATE capability_versions u SET latest = t.latest, latest_until = t.latest_until
          FROM target t
         WHERE u.tenant = t.tenant AND u.agent_id = t.agent_id AND u.skill_id = t.skill_id AND u.version = t.version
           AND (u.latest IS DISTINCT FROM t.latest OR u.latest_until IS DISTINCT FROM t.latest_until)"""


async def refresh_latest(
    conn: asyncpg.Connection, keys: list[tuple[str, str, str]], *, now: datetime, agents_locked: bool = False
) -> None:
    """Re-derive the latest marker of the given (tenant, agent, skill) keys, in the writing
    transaction. Takes each agent's registration lock first (db.agents.lock_agent, in key order) so
    concurrent writers of one skill refresh one after the other, each seeing the other's rows
    (`agents_locked`: the caller holds them already). Rows whose marker is already right are not
    written (a write of a row is a new tuple, with every index entry written again)."""
    if not keys:
        return
    if not agents_locked:
        for tenant, agent_id in sorted({(k[0], k[1]) for k in keys}):
            await lock_agent(conn, tenant, agent_id)
    await conn.execute(
        _refresh_latest_sql(
            "(c.tenant, c.agent_id, c.skill_id) IN (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]))", "$4"
        ),
        [k[0] for k in keys],
        [k[1] for k in keys],
        [k[2] for k in keys],
        now - CLOCK_SKEW_MARGIN,
    )


async def refresh_all_latest(conn: asyncpg.Connection, *, now: datetime) -> None:
    """The latest marker of every skill (migration 0012's backfill; bench data inserted with SQL)."""
    await conn.execute(_refresh_latest_sql("true", "$1"), now - CLOCK_SKEW_MARGIN)


async def content_hashes(
    conn: asyncpg.Connection, tenant: str, agent_id: str
) -> dict[tuple[str, str], tuple[str, str]]:
    """Every stored version of an agent, retired ones too: (skill_id, version_key) -> (version, content_hash).
    Keyed by precedence, not text: a version's identity (registry.versions.semver, one version per precedence)."""
    rows = await conn.fetch(
        "SELECT skill_id, version_key, version, content_hash FROM capability_versions WHERE tenant = $1 AND agent_id = $2",
        tenant,
        agent_id,
    )
    return {(r["skill_id"], r["version_key"]): (r["version"], r["content_hash"]) for r in rows}


async def insert_versions(
    conn: asyncpg.Connection, rows: list[dict[str, Any]], *, now: datetime, stored: Sequence[Mapping[str, Any]]
) -> None:
    """Insert new capability versions of one agent (rows with the same keys) in one pipelined round
    trip, under that agent's registration lock (db.agents.lock_agent, the caller's), then refresh
    their skills' latest marker. `stored`: the agent's versions that are not retired (version_contracts),
    for the marker the rows are inserted with (latest_marks). Their words go into the search
    lexicon once per batch (db.group_commit, WriteScope.index_words)."""
    if not rows:
        return
    marks = latest_marks([*rows, *stored], now=now)
    rows = [row | {"latest": latest, "latest_until": until} for row, (latest, until) in zip(rows, marks, strict=False)]
    columns = list(rows[0])
    placeholders = ", ".join(f"${i}" for i in range(1, len(columns) + 1))
    await conn.executemany(
        f"INSERT INTO capability_versions ({', '.join(columns)}) VALUES ({placeholders})",
        [tuple(row[column] for column in columns) for row in rows],
    )
    await refresh_latest(
        conn, [(row["tenant"], row["agent_id"], row["skill_id"]) for row in rows], now=now, agents_locked=True
    )


async def skill_versions(
    conn: asyncpg.Connection | asyncpg.Pool, tenant: str, agent_id: str, skill_id: str, *, detail: bool = False
) -> list[asyncpg.Record]:
    """Every version of one skill, newest first, retired and future ones included."""
    columns = DETAIL_COLUMNS if detail else PUBLIC_COLUMNS
    return await conn.fetch(
        f"""SELECT {columns}, {HEALTH_SQL} AS health, {LIVE_INSTANCES_SQL} AS live_instances
              FROM capability_versions c JOIN agents a ON a.tenant = c.tenant AND a.agent_id = c.agent_id
             WHERE c.tenant = $1 AND c.agent_id = $2 AND c.skill_id = $3
             ORDER BY c.version_key DESC, c.version COLLATE "C" DESC""",
        tenant,
        agent_id,
        skill_id,
    )


async def latest_per_skill(
    conn: asyncpg.Connection | asyncpg.Pool, tenant: str, agent_id: str, *, now: datetime, detail: bool = False
) -> list[asyncpg.Record]:
    """The newest version of each of an agent's skills in force at `now` (releases preferred over pre-releases)."""
    columns = DETAIL_COLUMNS if detail else PUBLIC_COLUMNS
    return await conn.fetch(
        f"""SELECT DISTINCT ON (c.skill_id) {columns}, {HEALTH_SQL} AS health, {LIVE_INSTANCES_SQL} AS live_instances
              FROM capability_versions c JOIN agents a ON a.tenant = c.tenant AND a.agent_id = c.agent_id
             WHERE c.tenant = $1 AND c.agent_id = $2 AND {in_force("c", "$3")}
             ORDER BY c.skill_id, {LATEST_ORDER}""",
        tenant,
        agent_id,
        now,
    )


async def known_regions(conn: asyncpg.Connection | asyncpg.Pool) -> frozenset[str]:
    """Every data region some capability version names (retired ones included: harmless extra keys)."""
    rows = await conn.fetch("SELECT DISTINCT unnest(data_regions) AS region FROM capability_versions")
    return frozenset(r["region"] for r in rows)


async def snapshot_bounds(conn: asyncpg.Connection | asyncpg.Pool, *, now: datetime) -> tuple[int, Any]:
    """The change sequence number now, and the next moment after `now` a version becomes effective
    (or None).

    Read before a cached response's query: the response is at least as new as that sequence number,
    and what is in force changes by itself at that moment.
    """
    row = await conn.fetchrow(
        """SELECT (SELECT seq FROM change_head WHERE id = 1) AS seq,
                  (SELECT min(effective_at) FROM capability_versions
                    WHERE effective_at > $1::timestamptz AND status <> 'retired') AS next_effective""",
        now,
    )
    return row["seq"], row["next_effective"]


def visible_agents_filter(viewer_tenant: str | None, bind: Callable[[Any], str]) -> str:
    """The SQL condition on agents `a` that discovery (and ranked search) show `viewer_tenant`
    (None: anonymous, public records only; nothing is bound); `bind` adds a parameter and answers
    its placeholder. Visibility is per agent."""
    return visible_to("a", None if viewer_tenant is None else bind(viewer_tenant))


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


# Section 3's filters on an agent's health and on version content, one definition for discovery and
# ranked search (db.ranked_search).
HAS_LIVE_INSTANCE = (
    "EXISTS (SELECT 1 FROM agent_instances i"
    " WHERE i.tenant = a.tenant AND i.agent_id = a.agent_id AND i.expires_at > now())"
)


def content_filter(
    bind: Callable[[Any], str],
    *,
    tags: list[str] | tuple[str, ...] | None,
    side_effect_max: int | None,
    region: str | None,
    status: str | None,
) -> list[str]:
    """The WHERE clauses on a version's content (alias `c`): tags all held, side effect at most,
    a region served (a version that names no regions serves every region), status."""
    clauses = []
    if tags:
        clauses.append(f"c.tags @> {bind(list(tags))}::text[]")
    if side_effect_max is not None:
        clauses.append(f"c.side_effect_rank <= {bind(side_effect_max)}")
    if region is not None:
        clauses.append(f"(cardinality(c.data_regions) = 0 OR {bind(region)} = ANY (c.data_regions))")
    if status is not None:
        clauses.append(f"c.status = {bind(status)}")
    return clauses


async def discover(
    conn: asyncpg.Connection | asyncpg.Pool,
    *,
    viewer_tenant: str | None,
    skill: str | None = None,
    tags: list[str] | None = None,
    side_effect_max: int | None = None,
    region: str | None = None,
    agent: str | None = None,
    tenant: str | None = None,
    status: str | None = None,
    healthy_only: bool = False,
    latest_only: bool = True,
    after: tuple[str, str, str, str] | None = None,
    limit: int = 50,
    now: datetime,
) -> list[asyncpg.Record]:
    """One page of public capability rows in (tenant, agent, skill, newest version first) order
    (with `q`, discovery asks db.ranked_search instead: ranked order).

    Filters on the (tenant, agent, skill) key are applied before choosing the latest version; filters
    on version content after it, so `versions=latest` means "the latest version, if it matches".
    """
    params: list[Any] = []

    def bind(value: Any) -> str:
        params.append(value)
        return f"${len(params)}"

    # Filters on the (tenant, agent, skill) key: applied before the latest version is chosen.
    agent_filters = []
    if tenant is not None:
        agent_filters.append(f"a.tenant = {bind(tenant)}")
    if agent is not None:
        agent_filters.append(f"a.agent_id = {bind(agent)}")
    agent_filters.append(visible_agents_filter(viewer_tenant, bind))
    if healthy_only:
        agent_filters.append(HAS_LIVE_INSTANCE)
    version_filters = [in_force("c", bind(now))]
    if skill is not None:
        if skill.endswith("*"):
            version_filters.append(f"c.skill_id LIKE {bind(_like_escape(skill[:-1]) + '%')}")
        else:
            version_filters.append(f"c.skill_id = {bind(skill)}")

    content_filters = content_filter(bind, tags=tags, side_effect_max=side_effect_max, region=region, status=status)

    # Both shapes walk agents in primary-key order and, per agent, its versions through an index
    # in page order (capability_versions_order, capability_versions_all_order), so a page stops
    # after `limit` matches instead of sorting every visible capability. The LATERAL form pins that
    # plan: with a plain join the planner misjudges the two-column join and sorts everything
    # (see docs/performance.md for the plans).
    if after is not None:
        k = [bind(part) for part in after[:3]]
        agent_filters.append(f"(a.tenant, a.agent_id) >= ({k[0]}, {k[1]})")
        if latest_only:
            content_filters.append(f"(a.tenant, a.agent_id, c.skill_id) > ({k[0]}, {k[1]}, {k[2]})")
        else:
            content_filters.append(
                f"((a.tenant, a.agent_id, c.skill_id) > ({k[0]}, {k[1]}, {k[2]})"
                f" OR ((a.tenant, a.agent_id, c.skill_id) = ({k[0]}, {k[1]}, {k[2]}) AND c.version_key < {bind(after[3])}))"
            )
    if latest_only:
        versions = f"""SELECT DISTINCT ON (c.skill_id) {PUBLIC_COLUMNS}, c.side_effect_rank
                         FROM capability_versions c
                        WHERE c.tenant = a.tenant AND c.agent_id = a.agent_id AND {" AND ".join(version_filters)}
                        ORDER BY c.skill_id, {LATEST_ORDER}"""
        order = "a.tenant, a.agent_id, c.skill_id"
    else:
        versions = f"""SELECT {PUBLIC_COLUMNS}, c.side_effect_rank
                         FROM capability_versions c
                        WHERE c.tenant = a.tenant AND c.agent_id = a.agent_id AND {" AND ".join(version_filters)}
                        ORDER BY c.skill_id, c.version_key DESC"""
        order = "a.tenant, a.agent_id, c.skill_id, c.version_key DESC"
    sql = f"""
        SELECT c.*, a.visibility AS agent_visibility, a.shared_with AS agent_shared_with, {HEALTH_SQL} AS health, {LIVE_INSTANCES_SQL} AS live_instances, {LEASE_UNTIL_SQL} AS lease_until
          FROM agents a CROSS JOIN LATERAL ({versions}) c
         WHERE {" AND ".join(agent_filters + content_filters)}
         ORDER BY {order}
         LIMIT {bind(limit)}"""
    return await conn.fetch(sql, *params)


# The content of a version that answers built from its agent show (views, cards, ARD entries), in
# the order registry.agents.registration.skill_content_size measures it for a new version.
SHOWN_CONTENT_COLUMNS = (
    "name",
    "description",
    "tags",
    "examples",
    "input_modes",
    "output_modes",
    "scopes",
    "data_regions",
    "input_schema",
    "output_schema",
)


async def skill_content_sizes(conn: asyncpg.Connection, tenant: str, agent_id: str) -> dict[str, int]:
    """Per skill of an agent with a version not retired: the largest such version's shown content, in
    bytes of its JSON text (about what a new version's skill_content_size counts; jsonb's text adds
    a space after each separator). Reads what version_contracts reads: the agent's own versions."""
    columns = ", ".join(SHOWN_CONTENT_COLUMNS)
    rows = await conn.fetch(
        f"""SELECT skill_id, max(octet_length(jsonb_build_array({columns})::text)) AS size
              FROM capability_versions
             WHERE tenant = $1 AND agent_id = $2 AND status <> 'retired'
             GROUP BY skill_id""",
        tenant,
        agent_id,
    )
    return {r["skill_id"]: r["size"] for r in rows}


async def version_contracts(conn: asyncpg.Connection, tenant: str, agent_id: str) -> list[asyncpg.Record]:
    """What the compatibility check compares, and what the latest marker is derived from
    (latest_marks), for every non-retired version of an agent's skills."""
    return await conn.fetch(
        """SELECT tenant, agent_id, skill_id, version, input_schema, output_schema, scopes, side_effect,
                  requires_approval, data_regions, status, fixture_count, version_key, prerelease, effective_at
             FROM capability_versions
            WHERE tenant = $1 AND agent_id = $2 AND status <> 'retired'""",
        tenant,
        agent_id,
    )


async def lock_version_status(
    conn: asyncpg.Connection, tenant: str, agent_id: str, skill_id: str, version: str
) -> str | None:
    """The version's status (None if there is no such version), its row locked for a lifecycle change."""
    return await conn.fetchval(
        """SELECT status FROM capability_versions
            WHERE tenant = $1 AND agent_id = $2 AND skill_id = $3 AND version = $4 FOR UPDATE""",
        tenant,
        agent_id,
        skill_id,
        version,
    )


async def deprecate_version(
    conn: asyncpg.Connection,
    tenant: str,
    agent_id: str,
    skill_id: str,
    version: str,
    sunset_at: datetime | None,
    message: str | None,
) -> None:
    await conn.execute(
        """UPDATE capability_versions
              SET status = 'deprecated', sunset_at = $5, deprecation_message = $6, updated_at = now()
            WHERE tenant = $1 AND agent_id = $2 AND skill_id = $3 AND version = $4""",
        tenant,
        agent_id,
        skill_id,
        version,
        sunset_at,
        message,
    )


async def retire_version(
    conn: asyncpg.Connection, tenant: str, agent_id: str, skill_id: str, version: str, *, now: datetime
) -> None:
    await conn.execute(
        """UPDATE capability_versions SET status = 'retired', updated_at = now()
            WHERE tenant = $1 AND agent_id = $2 AND skill_id = $3 AND version = $4""",
        tenant,
        agent_id,
        skill_id,
        version,
    )
    await refresh_latest(conn, [(tenant, agent_id, skill_id)], now=now)


async def fixtures_of(
    conn: asyncpg.Connection | asyncpg.Pool, tenant: str, agent_id: str, skill_id: str, version: str
) -> list[Any]:
    """A version's fixtures as stored (empty when it has none or does not exist)."""
    fixtures = await conn.fetchval(
        """SELECT fixtures FROM capability_versions
            WHERE tenant = $1 AND agent_id = $2 AND skill_id = $3 AND version = $4""",
        tenant,
        agent_id,
        skill_id,
        version,
    )
    return fixtures or []


async def version_status(
    conn: asyncpg.Connection | asyncpg.Pool, tenant: str, agent_id: str, skill_id: str, version: str
) -> str | None:
    """The version's status (None if there is no such version)."""
    return await conn.fetchval(
        """SELECT status FROM capability_versions
            WHERE tenant = $1 AND agent_id = $2 AND skill_id = $3 AND version = $4""",
        tenant,
        agent_id,
        skill_id,
        version,
    )


async def replay_subject(
    conn: asyncpg.Connection | asyncpg.Pool, tenant: str, agent_id: str, skill_id: str, version: str
) -> asyncpg.Record | None:
    """What judging a replay of a version reads: its status, baseline and outputSchema, and the
    baseline's fixtures (None: no such version)."""
    return await conn.fetchrow(
        """SELECT c.status, c.baseline, c.output_schema, b.fixtures AS baseline_fixtures
             FROM capability_versions c
             LEFT JOIN capability_versions b
               ON b.tenant = c.tenant AND b.agent_id = c.agent_id AND b.skill_id = c.skill_id AND b.version = c.baseline
            WHERE c.tenant = $1 AND c.agent_id = $2 AND c.skill_id = $3 AND c.version = $4""",
        tenant,
        agent_id,
        skill_id,
        version,
    )


async def release_candidate(
    conn: asyncpg.Connection, tenant: str, agent_id: str, skill_id: str, version: str, *, now: datetime
) -> None:
    """A candidate whose replay passed becomes active."""
    await conn.execute(
        """UPDATE capability_versions SET status = 'active', updated_at = now()
            WHERE tenant = $1 AND agent_id = $2 AND skill_id = $3 AND version = $4 AND status = 'candidate'""",
        tenant,
        agent_id,
        skill_id,
        version,
    )
    await refresh_latest(conn, [(tenant, agent_id, skill_id)], now=now)
