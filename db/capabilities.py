"""Queries on capability_versions: publishing, lookups by agent and skill, and discovery."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal, overload

import asyncpg
import msgspec

from auth.policy import IN_FORCE as IN_FORCE_RULE
from auth.policy import LATEST_ORDER as LATEST_ORDER_RULE
from auth.policy import NOT_WITHDRAWN as NOT_WITHDRAWN_RULE
from auth.policy import VISIBLE
from db.agents import HAS_LIVE_INSTANCE, HEALTH_SQL, LEASE_UNTIL_SQL, LIVE_INSTANCES_SQL, Health, lock_agent
from db.inserts import insert_statement
from db.rows import typed_row, typed_rows

PUBLIC_COLUMNS = (
    "c.tenant, c.agent_id, c.skill_id, c.version, c.version_key, c.prerelease, c.name, c.description, c.tags, "
    "c.scopes, c.side_effect, c.requires_approval, c.data_regions, c.slo, c.status, c.sunset_at, "
    "c.deprecation_message, c.effective_at, c.published_at, c.updated_at"
)


class PublicVersionRow(msgspec.Struct, frozen=True, gc=False):
    """A capability version's public content: PUBLIC_COLUMNS, in order (the head of every row that shows one)."""

    tenant: str
    agent_id: str
    skill_id: str
    version: str
    version_key: str
    prerelease: bool
    name: str
    description: str
    tags: list[str]
    scopes: list[str]
    side_effect: str
    requires_approval: bool
    data_regions: list[str]
    slo: dict[str, Any] | None
    status: str
    sunset_at: datetime | None
    deprecation_message: str | None
    effective_at: datetime | None
    published_at: datetime
    updated_at: datetime


# VersionRow's columns, of versions `c` and their agents `a` (skill_versions, latest_per_skill):
# PUBLIC_COLUMNS, then its own fields.
VERSION_COLUMNS = f"{PUBLIC_COLUMNS}, c.latest, {HEALTH_SQL} AS health, {LIVE_INSTANCES_SQL} AS live_instances"


class VersionRow(PublicVersionRow, frozen=True, gc=False):
    """A skill's version with its latest marker and its agent's health (skill_versions, latest_per_skill)."""

    latest: bool
    health: Health
    live_instances: int


# VersionDetailRow's columns: VERSION_COLUMNS, then its own fields. The fixtures themselves (up to
# 100 of 64 KiB) are read only for the version released (`fixtures_of`).
VERSION_DETAIL_COLUMNS = (
    VERSION_COLUMNS
    + ", c.examples, c.input_schema, c.output_schema, c.input_modes, c.output_modes, c.fixture_count, c.baseline"
)


class VersionDetailRow(VersionRow, frozen=True, gc=False):
    """A VersionRow with what only a detail shows: examples, schemas, modes, fixture count, baseline."""

    examples: list[str]
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    input_modes: list[str]
    output_modes: list[str]
    fixture_count: int
    baseline: str | None


class DiscoverRow(PublicVersionRow, frozen=True, gc=False):
    """A discovery row: public content, its agent's visibility, sharing, health, live instances, next lapse (discover)."""

    agent_visibility: str
    agent_shared_with: list[str]
    health: Health
    live_instances: int
    lease_until: datetime | None


class VersionContractRow(msgspec.Struct, frozen=True, gc=False):
    """What the compatibility check compares of a stored version not retired (version_contracts)."""

    tenant: str
    agent_id: str
    skill_id: str
    version: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    scopes: list[str]
    side_effect: str
    requires_approval: bool
    data_regions: list[str]
    status: str
    fixture_count: int
    version_key: str
    prerelease: bool
    effective_at: datetime | None


class RetiredVersionRow(msgspec.Struct, frozen=True, gc=False):
    """A version a withdrawal retired, with the status it had before (retire_agent_versions)."""

    skill_id: str
    version: str
    status: str


class ReplaySubjectRow(msgspec.Struct, frozen=True, gc=False):
    """What judging a replay reads: status, baseline, outputSchema, the baseline's fixtures (replay_subject)."""

    status: str
    baseline: str | None
    output_schema: dict[str, Any]
    baseline_fixtures: list[dict[str, Any]] | None


# `versions=all`, exact versions and ranges show what is in force now (auth.policy.IN_FORCE, the one
# definition, rendered here), by the app's clock: every query is given its `now` as a bound
# parameter, the moment the same request decides by in Python (release decides cached rows).
# Precedence among a skill's versions (auth.policy.LATEST_ORDER, rendered): the latest version of a
# skill is its first in-force version in this order, decided by refresh_latest alone and read by
# every path as the marker (latest_in_force below), so every path names the same one.
LATEST_ORDER = LATEST_ORDER_RULE.sql("c")


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


# The latest marker (migration 0012, 0016): `latest` holds on exactly the version of each skill
# that is its latest in force (auth.policy.IN_FORCE, then the first in LATEST_ORDER), decided by
# refresh_latest and only read elsewhere (latest_in_force, is_latest): discovery with and without
# `q`, ARD, cards, offers and a detail release of `latest` all name the version it marks. It is
# decided by the app's clock (registry.core.clock, the `now` each write and the housekeeping tick
# pass), at two kinds of moment: in the transaction of every write that changes what is in force
# (publishing, retiring, withdrawing an agent, releasing a candidate), under the agent's lock;
# and in the housekeeping tick that announces a version whose effectiveAt has come
# (db.housekeeping.announce_effective), so between a version's effectiveAt and that tick (at most
# registry.ops.housekeeping.ANNOUNCE_SECONDS, while the server runs) the version before it stays
# latest. A sunset date passing changes nothing: a deprecated version stays in force until retired.


def latest_in_force(alias: str) -> str:
    """The SQL condition: version row `alias` is the latest in-force version of its skill (the
    marker; not withdrawn too, which every write that withdraws one refreshes anyway, so that a
    reader never shows a withdrawn row whatever the marker says)."""
    return f"({alias}.latest AND {not_withdrawn(alias)})"


def is_latest(row: VersionRow) -> bool:
    """latest_in_force, on a row already read (its `latest` and `status`)."""
    return row.latest and NOT_WITHDRAWN_RULE.holds(row)


def _refresh_latest_sql(keys: str, now: str) -> str:
    """One window pass over the skills' versions in LATEST_ORDER: the first in force at `now` (a
    placeholder) is marked, every other row not (`keys`: a condition on `c`)."""
    return f"""
        WITH ordered AS MATERIALIZED (
            SELECT c.tenant, c.agent_id, c.skill_id, c.version, ({in_force("c", now)}) AS in_force,
                   count(*) FILTER (WHERE {in_force("c", now)}) OVER before AS in_force_before
              FROM capability_versions c
             WHERE {keys}
            WINDOW before AS (PARTITION BY c.tenant, c.agent_id, c.skill_id ORDER BY {LATEST_ORDER}
                              ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING))
        UPDATE capability_versions u SET latest = o.in_force AND o.in_force_before = 0
          FROM ordered o
         WHERE u.tenant = o.tenant AND u.agent_id = o.agent_id AND u.skill_id = o.skill_id AND u.version = o.version
           AND u.latest IS DISTINCT FROM (o.in_force AND o.in_force_before = 0)"""


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
        now,
    )


async def refresh_all_latest(conn: asyncpg.Connection, *, now: datetime) -> None:
    """The latest marker of every skill at `now` (migrations 0012 and 0016's backfill; bench data
    inserted with SQL)."""
    await conn.execute(_refresh_latest_sql("true", "$1"), now)


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


async def insert_versions(conn: asyncpg.Connection, rows: list[dict[str, Any]], *, now: datetime) -> None:
    """Insert new capability versions of one agent (rows with the same keys) in one pipelined round
    trip, under that agent's registration lock (db.agents.lock_agent, the caller's), then refresh
    their skills' latest marker at `now`: rows go in unmarked (the column's default) and the refresh
    marks the one that is latest, so the rule is decided in one place. Their words go into the search
    lexicon once per batch (db.group_commit, WriteScope.index_words). Rows carry no `published_at`:
    it is `now`."""
    if not rows:
        return
    # Published at `now`, the clock the marker and the tick judge effectiveAt by: a version whose
    # effectiveAt is still to come at `now` is one the tick announces (published_at < effective_at,
    # db.housekeeping), whatever the database's clock reads.
    columns = list(rows[0])
    await conn.executemany(
        insert_statement("capability_versions", [*columns, "published_at"]),
        [(*(row[column] for column in columns), now) for row in rows],
    )
    await refresh_latest(
        conn, [(row["tenant"], row["agent_id"], row["skill_id"]) for row in rows], now=now, agents_locked=True
    )


@overload
async def skill_versions(
    conn: asyncpg.Connection | asyncpg.Pool, tenant: str, agent_id: str, skill_id: str, *, detail: Literal[True]
) -> list[VersionDetailRow]: ...
@overload
async def skill_versions(
    conn: asyncpg.Connection | asyncpg.Pool, tenant: str, agent_id: str, skill_id: str, *, detail: bool = False
) -> list[VersionRow]: ...
async def skill_versions(
    conn: asyncpg.Connection | asyncpg.Pool, tenant: str, agent_id: str, skill_id: str, *, detail: bool = False
) -> list[Any]:
    """Every version of one skill, newest first, retired and future ones included, each with its
    latest marker (is_latest); with `detail`, VersionDetailRows."""
    records = await conn.fetch(
        f"""SELECT {VERSION_DETAIL_COLUMNS if detail else VERSION_COLUMNS}
              FROM capability_versions c JOIN agents a ON a.tenant = c.tenant AND a.agent_id = c.agent_id
             WHERE c.tenant = $1 AND c.agent_id = $2 AND c.skill_id = $3
             ORDER BY c.version_key DESC, c.version COLLATE "C" DESC""",
        tenant,
        agent_id,
        skill_id,
    )
    return typed_rows(VersionDetailRow if detail else VersionRow, records)


@overload
async def latest_per_skill(
    conn: asyncpg.Connection | asyncpg.Pool, tenant: str, agent_id: str, *, detail: Literal[True]
) -> list[VersionDetailRow]: ...
@overload
async def latest_per_skill(
    conn: asyncpg.Connection | asyncpg.Pool, tenant: str, agent_id: str, *, detail: bool = False
) -> list[VersionRow]: ...
async def latest_per_skill(
    conn: asyncpg.Connection | asyncpg.Pool, tenant: str, agent_id: str, *, detail: bool = False
) -> list[Any]:
    """The latest in-force version of each of an agent's skills (the marker: latest_in_force), by
    skill; with `detail`, VersionDetailRows."""
    records = await conn.fetch(
        f"""SELECT {VERSION_DETAIL_COLUMNS if detail else VERSION_COLUMNS}
              FROM capability_versions c JOIN agents a ON a.tenant = c.tenant AND a.agent_id = c.agent_id
             WHERE c.tenant = $1 AND c.agent_id = $2 AND {latest_in_force("c")}
             ORDER BY c.skill_id""",
        tenant,
        agent_id,
    )
    return typed_rows(VersionDetailRow if detail else VersionRow, records)


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


# Section 3's filters on version content, one definition for discovery and ranked search
# (db.ranked_search); the health filter is db.agents.HAS_LIVE_INSTANCE.


def serves_regions_sql(data_regions: str, regions: str) -> str:
    """auth.policy.serves_regions as SQL: the text[] column `data_regions` serves the text[] `regions`."""
    return f"(cardinality({data_regions}) = 0 OR {data_regions} && {regions})"


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
        clauses.append(serves_regions_sql("c.data_regions", f"ARRAY[{bind(region)}::text]"))
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
) -> list[DiscoverRow]:
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
    # `versions=latest` reads the marker (decided at write and by the housekeeping tick); `all`, every
    # version in force at `now`.
    version_filters = [latest_in_force("c") if latest_only else in_force("c", bind(now))]
    if skill is not None:
        if skill.endswith("*"):
            version_filters.append(f"c.skill_id LIKE {bind(_like_escape(skill[:-1]) + '%')}")
        else:
            version_filters.append(f"c.skill_id = {bind(skill)}")

    content_filters = content_filter(bind, tags=tags, side_effect_max=side_effect_max, region=region, status=status)

    # Both shapes walk agents in primary-key order and, per agent, its versions through an index
    # in page order (capability_versions_latest_agent's marked rows, capability_versions_all_order),
    # so a page stops after `limit` matches instead of sorting every visible capability. The LATERAL form pins that
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
        versions = f"""SELECT {PUBLIC_COLUMNS}, c.side_effect_rank
                         FROM capability_versions c
                        WHERE c.tenant = a.tenant AND c.agent_id = a.agent_id AND {" AND ".join(version_filters)}
                        ORDER BY c.skill_id"""
        order = "a.tenant, a.agent_id, c.skill_id"
    else:
        versions = f"""SELECT {PUBLIC_COLUMNS}, c.side_effect_rank
                         FROM capability_versions c
                        WHERE c.tenant = a.tenant AND c.agent_id = a.agent_id AND {" AND ".join(version_filters)}
                        ORDER BY c.skill_id, c.version_key DESC"""
        order = "a.tenant, a.agent_id, c.skill_id, c.version_key DESC"
    sql = f"""
        SELECT {PUBLIC_COLUMNS}, a.visibility AS agent_visibility, a.shared_with AS agent_shared_with, {HEALTH_SQL} AS health, {LIVE_INSTANCES_SQL} AS live_instances, {LEASE_UNTIL_SQL} AS lease_until
          FROM agents a CROSS JOIN LATERAL ({versions}) c
         WHERE {" AND ".join(agent_filters + content_filters)}
         ORDER BY {order}
         LIMIT {bind(limit)}"""
    return typed_rows(DiscoverRow, await conn.fetch(sql, *params))


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


async def version_contracts(
    conn: asyncpg.Connection | asyncpg.Pool, tenant: str, agent_id: str
) -> list[VersionContractRow]:
    """What the compatibility check compares, for every non-retired version of an agent's skills."""
    records = await conn.fetch(
        """SELECT tenant, agent_id, skill_id, version, input_schema, output_schema, scopes, side_effect,
                  requires_approval, data_regions, status, fixture_count, version_key, prerelease, effective_at
             FROM capability_versions
            WHERE tenant = $1 AND agent_id = $2 AND status <> 'retired'""",
        tenant,
        agent_id,
    )
    return typed_rows(VersionContractRow, records)


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


async def retire_agent_versions(
    conn: asyncpg.Connection, tenant: str, agent_id: str, *, now: datetime
) -> list[RetiredVersionRow]:
    """Retire every version of the agent not retired yet (its withdrawal); each one retired, with
    the status it had. The agent's registration lock is held."""
    records = await conn.fetch(
        """WITH before AS (
               SELECT skill_id, version, status FROM capability_versions
                WHERE tenant = $1 AND agent_id = $2 AND status <> 'retired'
                ORDER BY skill_id, version FOR UPDATE
           ), retired AS (
               UPDATE capability_versions c SET status = 'retired', updated_at = now()
                 FROM before b
                WHERE c.tenant = $1 AND c.agent_id = $2 AND c.skill_id = b.skill_id AND c.version = b.version
           )
           SELECT skill_id, version, status FROM before ORDER BY skill_id, version""",
        tenant,
        agent_id,
    )
    rows = typed_rows(RetiredVersionRow, records)
    skills = sorted({r.skill_id for r in rows})
    if skills:
        await refresh_latest(conn, [(tenant, agent_id, s) for s in skills], now=now, agents_locked=True)
    return rows


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
) -> ReplaySubjectRow | None:
    """What judging a replay of a version reads: its status, baseline and outputSchema, and the
    baseline's fixtures (None: no such version)."""
    record = await conn.fetchrow(
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
    return typed_row(ReplaySubjectRow, record)


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
