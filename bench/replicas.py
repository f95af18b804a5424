"""`python -m bench --replicas N`: N `capreg serve` processes on one PostgreSQL, under a fleet's load.

1. A registration storm: every agent registers `--rounds` times (default 3) with the same card,
   each time through a random replica, all agents concurrently (restarts of a fleet).
2. Then, at once: one heartbeat per agent through random replicas, new versions published for a
   tenth of the agents and tickets minted, both through every replica.
3. Invariants, checked afterwards: every version stored exactly once (one row, one
   `version.published` event, one change-feed entry), zero 5xx, every replica answers discovery
   identically within 1 s of the last write, `capreg audit verify` passes, the change feed and the
   audit chain have no gap.
4. Audited writes per second (ticket mints, each one `ticket.granted` event) through 1 replica and
   through all N, for the same duration: by 1 tenant (every event on one chain), then by 8 tenants
   each minting on its own capabilities (8 chains, which never wait for each other).

Prints a report and writes it as JSON next to the other results (bench/results or --out).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

from bench import data
from bench.__main__ import ROOT, create_database, drop_database, free_port, serve, stop, wait_ready


class Fleet:
    """N `capreg serve` processes (1 worker each) on one database, and the CLI on the same one."""

    def __init__(self, replicas: int, database_url: str | None, home: Path):
        self.home = home
        self.server_url = database_url
        self.database: str | None = None
        self.embedded = None
        self.count = replicas
        self.processes: list[subprocess.Popen] = []
        self.bases: list[str] = []
        self.ports: list[int] = []
        self.env = {**os.environ, "CAPREG_HOME": str(home), "PYTHONUNBUFFERED": "1"}

    def start(self) -> None:
        if self.server_url:
            self.database, self.env["DATABASE_URL"] = create_database(self.server_url, "capreg_replicas_")
        else:
            from db.embedded import start_embedded

            self.embedded = start_embedded(self.home)
            self.env["DATABASE_URL"] = self.embedded.get_uri()
        subprocess.run(
            [sys.executable, "-m", "registry.cli", "migrate"], env=self.env, cwd=ROOT, check=True, capture_output=True
        )
        for n in range(self.count):
            port = free_port()
            self.processes.append(serve(self.env, port, 1, self.home / f"serve-{n}.log"))
            self.ports.append(port)
            self.bases.append(f"http://127.0.0.1:{port}")
        for process, base, n in zip(self.processes, self.bases, range(self.count), strict=False):
            wait_ready(f"{base}/readyz", process, self.home / f"serve-{n}.log")

    def stop(self) -> None:
        for process in self.processes:
            stop(process)
        if self.database:
            drop_database(self.server_url, self.database)
        self.embedded = None

    def mint(self, tenant: str, sub: str, scopes: list[str]) -> str:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "registry.cli",
                "token",
                "mint",
                "--tenant",
                tenant,
                "--sub",
                sub,
                "--scope",
                " ".join(scopes),
                "--ttl",
                "86400",
                "--regions",
                ",".join(data.REGIONS),
            ],
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()


class Load:
    """Requests through random replicas with bounded concurrency; counts statuses."""

    def __init__(self, bases: list[str], concurrency: int, seed: int):
        self.clients = [
            httpx.AsyncClient(base_url=b, timeout=60, limits=httpx.Limits(max_connections=concurrency)) for b in bases
        ]
        self.gate = asyncio.Semaphore(concurrency)
        self.rng = random.Random(seed)
        self.statuses: Counter = Counter()
        self.failures: list[str] = []

    async def send(self, method: str, path: str, *, replica: int | None = None, **kwargs) -> httpx.Response | None:
        client = self.clients[self.rng.randrange(len(self.clients)) if replica is None else replica]
        async with self.gate:
            try:
                response = await client.request(method, path, **kwargs)
            except httpx.HTTPError as exc:
                self.statuses["connection error"] += 1
                self.failures.append(f"{method} {path}: {exc!r}")
                return None
        self.statuses[response.status_code] += 1
        if response.status_code >= 500:
            self.failures.append(f"{method} {path}: {response.status_code} {response.text[:300]}")
        return response

    async def close(self) -> None:
        for client in self.clients:
            await client.aclose()


async def _database_checks(dsn: str) -> dict:
    import asyncpg

    from db.agents import lease_live

    conn = await asyncpg.connect(dsn)
    try:
        versions = await conn.fetchval("SELECT count(*) FROM capability_versions")
        events = await conn.fetch(
            "SELECT ref, count(*) AS n FROM audit_events WHERE type = 'version.published' GROUP BY ref HAVING count(*) <> 1"
        )
        published = await conn.fetchval("SELECT count(*) FROM audit_events WHERE type = 'version.published'")
        feed_dupes = await conn.fetchval(
            "SELECT count(*) FROM (SELECT ref FROM changes WHERE kind = 'version.published' GROUP BY ref HAVING count(*) <> 1) d"
        )
        feed = await conn.fetchrow(
            "SELECT count(*) AS n, coalesce(min(seq), 1) AS lo, coalesce(max(seq), 0) AS hi FROM changes"
        )
        chain = await conn.fetchrow("SELECT count(*) AS n FROM audit_events")
        # Each tenant's chain: chainSeq 1..n without a gap, and its head row at n.
        broken_chains = await conn.fetchval(
            """SELECT count(*) FROM (SELECT chain, count(*) AS n, min(chain_seq) AS lo, max(chain_seq) AS hi
                                        FROM audit_events WHERE chain IS NOT NULL GROUP BY chain) c
                 LEFT JOIN audit_chain_heads h USING (chain)
                WHERE c.lo <> 1 OR c.hi <> c.n OR h.chain_seq IS DISTINCT FROM c.n"""
        )
        change_head = await conn.fetchval("SELECT seq FROM change_head WHERE id = 1")
        live = await conn.fetchval(f"SELECT count(*) FROM agent_instances i WHERE {lease_live('i')}")
    finally:
        await conn.close()
    return {
        "versions_stored": versions,
        "version_published_events": published,
        "versions_with_other_than_one_event": len(events),
        "versions_with_other_than_one_feed_entry": feed_dupes,
        "feed_gap_free": feed["lo"] == 1 and feed["hi"] == feed["n"] == change_head,
        "chain_gap_free": broken_chains == 0,
        "audit_events": chain["n"],
        "changes": feed["n"],
        "live_instances": live,
    }


async def _audit_head(dsn: str) -> int:
    """The highest seq written (every chain's entries take their seq from one sequence)."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval("SELECT coalesce(max(seq), 0) FROM audit_events")
    finally:
        await conn.close()


async def _batches_since(dsn: str, seq: int) -> tuple[int, int]:
    """(events, batches) appended after `seq`: one group-commit batch stamps all its events with one
    `at` (an event of two tenants is two entries with one eventId: counted once)."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow(
            "SELECT count(DISTINCT event_id) AS n, count(DISTINCT at) AS b FROM audit_events WHERE seq > $1", seq
        )
        return row["n"], row["b"]
    finally:
        await conn.close()


async def _discovery_agreement(bases: list[str], queries: list[str], limit_seconds: float) -> tuple[bool, float]:
    """Seconds until every replica answers every query with the same body (polled every 50 ms)."""
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=30) as http:
        while True:
            agreed = True
            for query in queries:
                bodies = {(await http.get(base + query)).content for base in bases}
                agreed = agreed and len(bodies) == 1
            elapsed = time.monotonic() - started
            if agreed or elapsed > max(limit_seconds * 5, 5):
                return agreed and elapsed <= limit_seconds, elapsed
            await asyncio.sleep(0.05)


def _generate(job: dict) -> dict:
    """One bench/load.py process for `job`; its JSON output."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.load"], input=json.dumps(job).encode(), capture_output=True, cwd=ROOT, check=True
    )
    return json.loads(done.stdout)


async def _scenario(fleet: Fleet, args, tokens: dict[str, str], reader: str) -> dict:
    specs = data.agents(args.seed, args.agents)
    load = Load(fleet.bases, args.connections, args.seed)
    report: dict = {"replicas": fleet.count, "agents": args.agents, "rounds": args.rounds}
    dsn = fleet.env["DATABASE_URL"]

    def publisher(tenant: str) -> dict:
        return {"Authorization": f"Bearer {tokens[tenant]}", "Content-Type": "application/json"}

    bodies = {a.agent_id: json.dumps(a.card) for a in specs}
    # 1. Registration storm: every agent `rounds` times, in a random order, through random replicas.
    puts = [a for a in specs for _ in range(args.rounds)]
    load.rng.shuffle(puts)
    started = time.monotonic()
    await asyncio.gather(
        *[
            load.send(
                "PUT", f"/v1/agents/{a.tenant}/{a.agent_id}", content=bodies[a.agent_id], headers=publisher(a.tenant)
            )
            for a in puts
        ]
    )
    storm = time.monotonic() - started
    report["registration_storm"] = {
        "requests": len(puts),
        "seconds": round(storm, 2),
        "rps": round(len(puts) / storm, 1),
        "statuses": {str(k): v for k, v in load.statuses.items()},
    }
    print(
        f"  registration storm: {len(puts)} PUTs in {storm:.1f}s ({len(puts) / storm:,.0f}/s) {dict(load.statuses)}",
        flush=True,
    )

    # 2. Heartbeats, new versions and ticket mints, all at once, through every replica.
    public = [a for a in specs if a.card["visibility"] == "public"]
    mintable = [(a, s) for a in public for s in a.card["skills"] if s["sideEffect"] != "destructive"][:200]
    mint_bodies = [
        json.dumps(
            {
                "audience": f"{a.tenant}/{a.agent_id}",
                "skill": s["id"],
                "version": "^" + s["version"].split(".")[0],
                "scopes": s["scopes"],
                "ttlSeconds": 300,
                "maxDepth": 0,
            }
        )
        for a, s in mintable
    ]
    reader_headers = {"Authorization": f"Bearer {reader}", "Content-Type": "application/json"}
    newer = specs[::10]
    before = Counter(load.statuses)
    started = time.monotonic()
    beats = [
        load.send(
            "POST",
            f"/v1/agents/{a.tenant}/{a.agent_id}/heartbeat",
            content=json.dumps({"instanceId": "i-1", "ttlSeconds": 300, "load": 0.5}),
            headers=publisher(a.tenant),
        )
        for a in specs
    ]
    versions = [
        load.send(
            "PUT",
            f"/v1/agents/{a.tenant}/{a.agent_id}",
            content=json.dumps(data.agent(args.seed, i, 1).card),
            headers=publisher(a.tenant),
        )
        for i, a in zip(range(0, args.agents, 10), newer, strict=False)
    ]
    mints = (
        [
            load.send("POST", "/v1/tickets", content=mint_bodies[n % len(mint_bodies)], headers=reader_headers)
            for n in range(len(newer) * 2)
        ]
        if mint_bodies
        else []
    )
    await asyncio.gather(*beats, *versions, *mints)
    mixed = time.monotonic() - started
    mixed_count = len(beats) + len(versions) + len(mints)
    report["mixed"] = {
        "heartbeats": len(beats),
        "new_version_puts": len(versions),
        "ticket_mints": len(mints),
        "seconds": round(mixed, 2),
        "rps": round(mixed_count / mixed, 1),
        "statuses": {str(k): v for k, v in (load.statuses - before).items()},
    }
    print(
        f"  mixed phase: {mixed_count} requests in {mixed:.1f}s ({mixed_count / mixed:,.0f}/s) {dict(load.statuses - before)}",
        flush=True,
    )

    # 3. Invariants.
    agreed, agree_seconds = await _discovery_agreement(
        fleet.bases,
        ["/v1/capabilities?limit=200", "/v1/capabilities?versions=all&limit=200", "/v1/changes?after=0&limit=1000"],
        1.0,
    )
    checks = await _database_checks(dsn)
    expected_versions = sum(len(a.card["skills"]) for a in specs) + sum(
        len(data.agent(args.seed, i, 1).card["skills"]) for i in range(0, args.agents, 10)
    )
    verify = subprocess.run(
        [sys.executable, "-m", "registry.cli", "audit", "verify"],
        env=fleet.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    five_xx = sum(v for k, v in load.statuses.items() if k == "connection error" or (isinstance(k, int) and k >= 500))
    report["invariants"] = {
        "every_version_stored_once": checks["versions_stored"]
        == expected_versions
        == checks["version_published_events"]
        and checks["versions_with_other_than_one_event"] == 0
        and checks["versions_with_other_than_one_feed_entry"] == 0,
        "expected_versions": expected_versions,
        "zero_5xx": five_xx == 0,
        "discovery_agrees_within_1s": agreed,
        "discovery_agreement_seconds": round(agree_seconds, 3),
        "audit_verify_passes": verify.returncode == 0,
        "audit_verify_output": (verify.stdout + verify.stderr).strip()[-300:],
        "change_feed_gap_free": checks["feed_gap_free"],
        "audit_chain_gap_free": checks["chain_gap_free"],
        "live_instances": checks["live_instances"],
        **{k: v for k, v in checks.items() if k not in ("feed_gap_free", "chain_gap_free", "live_instances")},
    }
    report["failures"] = load.failures[:20]

    # 4. Audited writes per second: ticket mints from the raw load generator (bench/load.py; an
    # httpx client would be the limit), through one replica, then split over every replica; by one
    # tenant (one chain), then by every tenant on its own capabilities (a chain each).
    await load.close()
    if mint_bodies:
        per_tenant = {
            t: [
                json.dumps(
                    {
                        "audience": f"{a.tenant}/{a.agent_id}",
                        "skill": s["id"],
                        "version": "^" + s["version"].split(".")[0],
                        "scopes": s["scopes"],
                        "ttlSeconds": 300,
                        "maxDepth": 0,
                    }
                )
                for a in public
                if a.tenant == t
                for s in a.card["skills"]
                if s["sideEffect"] != "destructive"
            ][:50]
            for t in data.TENANTS
        }
        minting = [t for t in data.TENANTS if per_tenant[t]]
        routers = {
            t: {"Authorization": f"Bearer {tokens['router:' + t]}", "Content-Type": "application/json"} for t in minting
        }
        rates = {}
        spreads = [("1 replica", fleet.ports[:1])] + (
            [(f"{fleet.count} replicas", fleet.ports)] if fleet.count > 1 else []
        )
        for tenants in ([minting[0]], minting):
            requests = [
                {"method": "POST", "path": "/v1/tickets", "headers": routers[t], "body": b}
                for t in tenants
                for b in per_tenant[t]
            ]
            for label, ports in spreads:
                head = await _audit_head(dsn)
                started = time.monotonic()
                jobs = [
                    {
                        "host": "127.0.0.1",
                        "port": port,
                        "connections": max(1, args.connections // len(ports)),
                        "duration": args.duration,
                        "warmup": 0,
                        "expect": [201],
                        "requests": requests,
                    }
                    for port in ports
                ]
                outs = await asyncio.gather(*[asyncio.to_thread(_generate, job) for job in jobs])
                seconds = time.monotonic() - started
                events, batches = await _batches_since(dsn, head)
                key = f"{len(tenants)} tenant{'s' if len(tenants) > 1 else ''}, {label}"
                # Per second of load (the generators' own window): their start-up, slower with several
                # of them on a busy machine, is not load time.
                rates[key] = {
                    "audit_events_per_second": round(events / args.duration, 1),
                    "commits_per_second": round(batches / args.duration, 1),
                    "wall_seconds": round(seconds, 1),
                    "events_per_commit": round(events / max(batches, 1), 1),
                    "mints_per_second": round(sum(len(o["latencies_us"]) for o in outs) / args.duration, 1),
                    "errors": sum(o["errors"] for o in outs),
                }
                print(f"  audited writes, {key}: {rates[key]}", flush=True)
        report["audited_writes_per_second"] = rates
    return report


def main(args) -> int:
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="capreg-bench-run-"))
    home = Path(tempfile.mkdtemp(prefix="capreg-replicas-"))
    fleet = Fleet(args.replicas, args.database_url, home)
    started = time.monotonic()
    try:
        fleet.start()
        print(f"{fleet.count} replicas up ({time.monotonic() - started:.0f}s): {', '.join(fleet.bases)}", flush=True)
        tokens = {t: fleet.mint(t, "fleet-publisher", ["registry:publish", "registry:read"]) for t in data.TENANTS}
        scopes = sorted({f"{n}:{m}" for ns in data.DOMAINS.values() for n in ns for m in ("read", "write")})
        reader = fleet.mint("acme", "fleet-router", ["registry:read", *scopes])
        # Each tenant's own router, minting tickets on its own tenant's capabilities (phase 4).
        tokens.update({f"router:{t}": fleet.mint(t, "fleet-router", ["registry:read", *scopes]) for t in data.TENANTS})
        report = asyncio.run(_scenario(fleet, args, tokens, reader))
    finally:
        fleet.stop()
    report["elapsed_seconds"] = round(time.monotonic() - started, 1)
    report["at"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"replicas-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(report, indent=2, default=str))
    print(
        json.dumps(
            {k: report[k] for k in ("invariants", "audited_writes_per_second") if k in report}, indent=2, default=str
        )
    )
    ok = all(
        report["invariants"][k]
        for k in (
            "every_version_stored_once",
            "zero_5xx",
            "discovery_agrees_within_1s",
            "audit_verify_passes",
            "change_feed_gap_free",
            "audit_chain_gap_free",
        )
    )
    print(
        f"\n{'all invariants hold' if ok else 'INVARIANT BROKEN'}; {report['elapsed_seconds']:.0f}s; results in {path}"
    )
    return 0 if ok else 1
