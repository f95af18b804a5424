"""`python -m bench.search_cost`: what ranked search costs at the sizes users reach, through the real
server (docs/performance.md#ranked-search).

Inserts capability versions with SQL (default 400,000: about 95,000 agents of 4 skills, every fifth
skill with two versions; the same columns registration writes), starts `capreg serve` on them
(the search engine builds its index from PostgreSQL at start-up: the time to ready is reported), then
drives each ranked path with 32 keep-alive connections, every request worded differently so that no
cache answers it (cold): discovery `q` with a word in every record, discovery with a five-word
question, ARD search, ARD explore and offers; then all of them mixed. Also reported: the server's
RSS with the index against the same server on an empty database (the engine's share), and the same
with meaning switched off (CAPREG_SEARCH_MEANING=0).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bench import data
from bench.__main__ import (
    Capreg,
    create_database,
    drive,
    drop_database,
    serve,
    stop,
    tree_rss_mb,
    wait_ready,
)

# Words to build descriptions from (besides the domain nouns and verbs).
FILLER = ["returns", "records", "customer", "records", "team", "records", "status", "history", "quickly", "lines"]


def insert_sql(agents: int) -> str:
    """Agents and versions from generate_series: agent i of tenant i % 8 (every third private),
    4 skills each, 1 version per skill (2 for every fifth agent's first skill), words drawn from
    bench.data's vocabulary; every description says "for agent i"."""
    nouns = [n for ns in data.DOMAINS.values() for n in ns]
    domains = [d for d, ns in data.DOMAINS.items() for _ in ns]
    arr = lambda xs: "ARRAY[" + ", ".join(f"'{x}'" for x in xs) + "]"  # noqa: E731 (constants only)
    params = f"""params AS (SELECT {arr(data.TENANTS)} AS tenants, {arr(nouns)} AS nouns, {arr(domains)} AS domains,
                           {arr(data.VERBS)} AS verbs, {arr(FILLER)} AS filler, {arr(data.REGIONS)} AS regions)"""
    return f"""
    WITH {params}
    INSERT INTO agents (tenant, agent_id, name, description, version, provider, visibility, shared_with, card, card_hash)
    SELECT p.tenants[1 + i % 8], 'agent-' || i, 'Agent ' || i, 'bench agent', '1.0.0', NULL,
           CASE WHEN i % 3 = 0 THEN 'tenant' ELSE 'public' END, '{{}}', '{{}}'::jsonb, md5(i::text)
      FROM params p, generate_series(0, {agents} - 1) AS i;

    WITH {params},
         skills AS (
           SELECT i, s, p.tenants[1 + i % 8] AS tenant, 'agent-' || i AS agent_id,
                  p.nouns[1 + (i * 7 + s * 13) % {len(nouns)}] AS noun, p.domains[1 + (i * 7 + s * 13) % {len(nouns)}] AS domain,
                  p.verbs[1 + (i * 3 + s) % {len(data.VERBS)}] AS verb,
                  p.filler[1 + (i + s) % {len(FILLER)}] AS filler, p.regions[1 + i % 5] AS region
             FROM params p, generate_series(0, {agents} - 1) AS i, generate_series(0, 3) AS s)
    INSERT INTO capability_versions (tenant, agent_id, skill_id, version, version_key, prerelease, name, description,
                                     tags, scopes, side_effect, side_effect_rank, requires_approval, data_regions, slo,
                                     input_schema, output_schema, content_hash, search_text)
    SELECT k.tenant, k.agent_id, k.noun || '.' || k.verb || '-' || k.s, v || '.0.0', lpad(v::text, 8, '0'), false,
           initcap(k.verb) || ' ' || k.noun || ' ' || k.i, k.verb || 's a ' || k.noun || ' ' || k.filler || ' for agent ' || k.i,
           ARRAY[k.domain, k.noun], '{{}}', 'none', 0, false,
           CASE WHEN k.i % 2 = 0 THEN ARRAY[k.region] ELSE '{{}}'::text[] END, '{{"latencyP99Ms": 500}}'::jsonb,
           '{{"type": "object"}}'::jsonb, '{{"type": "object"}}'::jsonb, md5(k.i || '.' || k.s || '.' || v), ''
      FROM skills k, generate_series(1, CASE WHEN k.s = 0 AND k.i % 5 = 0 THEN 2 ELSE 1 END) AS v;
    """


async def load_rows(dsn: str, versions: int) -> dict:
    import asyncpg

    from db import capabilities
    from db.migrate import apply_migrations

    agents = max(1, versions * 10 // 42)  # 4 skills per agent, every fifth agent's first skill twice
    conn = await asyncpg.connect(dsn)
    try:
        await apply_migrations(conn)
        started = time.monotonic()
        await conn.execute(insert_sql(agents))
        # Rows inserted with SQL: the latest marker as publishing would leave it (db.capabilities).
        await capabilities.refresh_all_latest(conn, now=datetime.now(UTC))
        await conn.execute("VACUUM ANALYZE")
        return {
            "agents": agents,
            "versions": await conn.fetchval("SELECT count(*) FROM capability_versions"),
            "load_seconds": round(time.monotonic() - started, 1),
        }
    finally:
        await conn.close()


def _get(path: str, headers: dict | None = None) -> dict:
    return {"method": "GET", "path": path, "headers": headers or {}}


def _post(path: str, body: dict, headers: dict | None = None) -> dict:
    return {
        "method": "POST",
        "path": path,
        "headers": {"Content-Type": "application/json", **(headers or {})},
        "body": json.dumps(body),
    }


def workloads(agents: int, token: str, n: int) -> dict[str, list[dict]]:
    """Per path, `n` requests each worded differently (a number no cache has seen)."""
    from urllib.parse import quote

    auth = {"Authorization": f"Bearer {token}"}
    nums = [(i * 7919) % agents for i in range(n)]
    return {
        "discovery q: a word in every record": [_get(f"/v1/capabilities?q={quote(f'agent {k}')}") for k in nums],
        "discovery q: five-word question": [
            _get(f"/v1/capabilities?q={quote(f'find refund records for customer {k}')}") for k in nums
        ],
        "ARD search": [
            _post("/ard/search", {"query": {"text": f"invoice lookup agent {k}"}, "pageSize": 10}) for k in nums
        ],
        "ARD explore": [
            _post(
                "/ard/explore",
                {"query": {"text": f"payment records {k}"}, "resultType": {"facets": [{"field": "tags"}]}},
            )
            for k in nums
        ],
        "offers": [_post("/v1/offers", {"need": f"export the ledger report {k}"}, auth) for k in nums],
    }


def run_load(port: int, requests: list[dict], connections: int, duration: float) -> dict:
    job = {
        "host": "127.0.0.1",
        "port": port,
        "connections": connections,
        "duration": duration,
        "warmup": 0.5,
        "expect": [200],
        "requests": requests,
    }
    figures = drive(job)
    return {k: figures[k] for k in ("requests", "errors", "rps", "p50_ms", "p99_ms", "statuses")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.search_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--versions", type=int, default=400_000, help="capability versions to insert (default 400,000)")
    parser.add_argument("--database-url", help="create fresh databases on this PostgreSQL server (default: embedded)")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per path")
    parser.add_argument("--json", type=Path, help="write the report to this file")
    args = parser.parse_args(argv)

    home = Path(tempfile.mkdtemp(prefix="capreg-search-cost-"))
    report: dict = {"connections": args.connections, "duration": args.duration, "paths": {}}
    capreg = Capreg(args.database_url, 1, home)
    embedded = None
    if args.database_url:
        capreg.database, capreg.env["DATABASE_URL"] = create_database(args.database_url, "capreg_search_")
        dsn = capreg.env["DATABASE_URL"]
    else:
        dsn, embedded = capreg.dsn()
    try:
        report.update(asyncio.run(load_rows(dsn, args.versions)))
        print(
            f"{report['versions']:,} versions of {report['agents']:,} agents loaded in {report['load_seconds']} s",
            flush=True,
        )
        log = home / "serve.log"
        started = time.monotonic()
        capreg.process = serve(capreg.env, capreg.port, 1, log)
        wait_ready(f"{capreg.base}/readyz", capreg.process, log, timeout=900)
        report["start_to_ready_seconds"] = round(time.monotonic() - started, 1)
        report["rss_mb_ready"] = round(tree_rss_mb(capreg.process.pid), 1)
        print(f"ready in {report['start_to_ready_seconds']} s, RSS {report['rss_mb_ready']} MB", flush=True)
        token = capreg.mint({"router": ("acme", "router", ["registry:read"], None)})["router"]
        paths = workloads(report["agents"], token, 20_000)
        for title, requests in paths.items():
            report["paths"][title] = run_load(capreg.port, requests, args.connections, args.duration)
            print(f"{title}: {json.dumps(report['paths'][title])}", flush=True)
        mixed = [r for group in zip(*paths.values(), strict=True) for r in group]
        report["paths"]["mixed"] = run_load(capreg.port, mixed, args.connections, args.duration)
        print(f"mixed: {json.dumps(report['paths']['mixed'])}", flush=True)
        report["rss_mb_after"] = round(tree_rss_mb(capreg.process.pid), 1)
        stop(capreg.process)
        # The engine's share: the same server, meaning off; and on an empty database.
        for label, env in (("rss_mb_ready_meaning_off", {**capreg.env, "CAPREG_SEARCH_MEANING": "0"}),):
            capreg.process = serve(env, capreg.port, 1, log)
            wait_ready(f"{capreg.base}/readyz", capreg.process, log, timeout=900)
            report[label] = round(tree_rss_mb(capreg.process.pid), 1)
            stop(capreg.process)
        empty_home = Path(tempfile.mkdtemp(prefix="capreg-search-empty-"))
        empty = Capreg(args.database_url, 1, empty_home)
        empty.start()
        report["rss_mb_ready_empty_database"] = round(tree_rss_mb(empty.process.pid), 1)
        empty.stop()
    finally:
        stop(capreg.process)
        if capreg.database:
            drop_database(args.database_url, capreg.database)
        del embedded
    print(json.dumps({k: v for k, v in report.items() if k != "paths"}))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
