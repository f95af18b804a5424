"""`python -m bench.cpu_per_request`: CPU time per request of each hot path, measured in-process.

Throughput on a shared 2-core machine says more about the neighbours than about capreg; CPU time
per request does not (much). This starts the app in this process (its lifespan, pool, group commit,
schema workers: everything `capreg serve` runs but the HTTP server) on a database of its own, loads
agents from bench.data through the API, then for each scenario issues warm-up requests and N
measured requests from C concurrent tasks as raw ASGI calls (no HTTP client: its CPU would be
counted as the server's) and reports:

- `app_us`: CPU of this process per request (time.process_time: every thread, the event loop,
  asyncpg, the group-commit tasks), the figure to compare before and after a change;
- `workers_us`: CPU of the schema worker processes (registry.core.bounded_work) per request;
- `pg_us`: CPU of the PostgreSQL backends serving this database per request (from /proc; 0 when the
  server is not on this machine or not readable);
- `gc_us`: the part of `app_us` spent in the cyclic garbage collector (`gc2_runs` full collections,
  `objects` tracked at the end: a full collection's cost grows with them);
- `commits`, `blocks`, `tuples`: this database's commits, buffers touched (hit or read) and tuples
  read per request (pg_stat_database; the meter's own reads included, a few per scenario): what
  grows with the data shows here first;
- `batches`: group-commit batches (transactions) per request: 1 / the mean batch size;
- `wal_bytes`: WAL written per request, on the whole server (others' writes included); with the
  pg_walinspect extension in the database, `own_wal_bytes` and `own_fpi_bytes` (full-page images)
  count this database's records only;
- `wall_us`: wall time per request at that concurrency (load-sensitive; for orientation only).

Usage (a database server of your own choice; a fresh database is created and dropped):

    .venv/bin/python -m bench.cpu_per_request --database-url postgresql://postgres@127.0.0.1:5432/postgres
    ... --agents 1000 --requests 2000 --concurrency 8 --only detail,ticket_mint
    ... --keep capreg_cpu_x     # keep (or reuse, when it exists and is loaded) that database
    ... --profile-seconds 0     # nothing else; py-spy can be attached to this process meanwhile

The figures include the cost of building the ASGI scope and reading the answer (a few µs), not the
HTTP server's own parsing (granian, in Rust, plus its hand-off to Python).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import secrets
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import msgspec

from bench import data

LEASE_TTL = 30
BATCHES = [0]  # group-commit batches run in this process (counted by _count_batches)


def _count_batches() -> None:
    from db.group_commit import GroupCommit

    run = GroupCommit._execute

    async def counted(self, conn, batch):
        BATCHES[0] += 1
        return await run(self, conn, batch)

    GroupCommit._execute = counted  # type: ignore[method-assign]


def _with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


def _ticks(pid: int) -> int:
    """utime + stime of a process, in clock ticks (0 if it is gone or not readable)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])


def _children() -> list[int]:
    pids: list[int] = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        with contextlib.suppress(OSError):
            pids += [int(p) for p in (task / "children").read_text().split()]
    return pids


class Request(msgspec.Struct):
    method: str
    path: str
    headers: list[tuple[bytes, bytes]]
    body: bytes = b""


def request(method: str, path: str, token: str | None = None, body: object = None) -> Request:
    headers = [(b"host", b"registry.test"), (b"user-agent", b"bench")]
    if token:
        headers.append((b"authorization", b"Bearer " + token.encode()))
    raw = b""
    if body is not None:
        raw = body if isinstance(body, bytes) else msgspec.json.encode(body)
        headers += [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    return Request(method, path, headers, raw)


def fleet_beat(a: data.AgentSpec, publishers: dict[str, str]) -> Request:
    """One instance of agent `a` live for an hour (instance `fleet`, a load drawn from its id)."""
    return request(
        "POST",
        f"/v1/agents/{a.tenant}/{a.agent_id}/heartbeat",
        publishers[a.tenant],
        {
            "instanceId": "fleet",
            "url": f"https://{a.agent_id}.fleet.internal",
            "ttlSeconds": 3600,
            "load": data.fleet_load(a),
        },
    )


async def call(app, req: Request) -> tuple[int, bytes]:
    """One ASGI request: the status and body of the answer."""
    path, _, query = req.path.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": req.method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": req.headers,
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
    }
    sent = False
    done = asyncio.Event()

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": req.body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    status, chunks = 0, []

    async def send(message):
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                done.set()

    await app(scope, receive, send)
    done.set()
    return status, b"".join(chunks)


class Meter:
    """CPU of this process, its child processes and the database's backends between start and stop,
    and the part of this process's CPU spent in Python's cyclic garbage collector (by generation)."""

    def __init__(self, pool: asyncpg.Pool, database: str):
        self.pool, self.database = pool, database
        self.hz = os.sysconf("SC_CLK_TCK")
        self.gc_seconds = [0.0, 0.0, 0.0]
        self.gc_runs = [0, 0, 0]
        self._gc_started = 0.0
        gc.callbacks.append(self._gc)

    def _gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_started = time.process_time()
        else:
            self.gc_seconds[info["generation"]] += time.process_time() - self._gc_started
            self.gc_runs[info["generation"]] += 1

    async def _backends(self) -> int:
        pids = await self.pool.fetch("SELECT pid FROM pg_stat_activity WHERE datname = $1", self.database)
        return sum(_ticks(r["pid"]) for r in pids)

    async def _db_counters(self) -> tuple[int, int, int]:
        """This database's commits, buffers touched (hit + read) and tuples read, as pg_stat_database
        counts them: every backend flushes its counts within a second of going idle."""
        await asyncio.sleep(1.2)
        await self.pool.execute("SELECT pg_stat_force_next_flush()")
        row = await self.pool.fetchrow(
            """SELECT xact_commit, blks_hit + blks_read AS blocks, tup_returned + tup_fetched AS tuples
                 FROM pg_stat_database WHERE datname = current_database()"""
        )
        return row["xact_commit"], row["blocks"], row["tuples"]

    async def start(self) -> None:
        self.counters0 = await self._db_counters()
        self.workers0 = sum(_ticks(p) for p in _children())
        self.pg0 = await self._backends()
        self.wal0 = await self.pool.fetchval("SELECT pg_current_wal_lsn()")
        self.batches0 = BATCHES[0]
        self.gc_seconds, self.gc_runs = [0.0, 0.0, 0.0], [0, 0, 0]
        self.wall0, self.cpu0 = time.perf_counter(), time.process_time()

    async def stop(self, n: int) -> dict[str, float]:
        cpu, wall = time.process_time() - self.cpu0, time.perf_counter() - self.wall0
        workers = sum(_ticks(p) for p in _children()) - self.workers0
        pg = await self._backends() - self.pg0
        wal = await self.pool.fetchval("SELECT pg_current_wal_lsn() - $1::pg_lsn", self.wal0)
        batches = BATCHES[0] - self.batches0
        # Less the meter's own reads (one commit and a few buffers per read of the counters).
        counters = [b - a for a, b in zip(self.counters0, await self._db_counters(), strict=True)]
        own = None
        if await self.pool.fetchval("SELECT 1 FROM pg_extension WHERE extname = 'pg_walinspect'"):
            # This database's WAL records only (a relation's block_ref names its database's oid):
            # other sessions' writes on the server are not counted.
            with contextlib.suppress(asyncpg.PostgresError):  # the window's WAL may be recycled already
                own = await self.pool.fetchrow(
                    """SELECT coalesce(sum(record_length), 0) AS bytes, coalesce(sum(fpi_length), 0) AS fpi
                         FROM pg_get_wal_records_info($1::pg_lsn, pg_current_wal_lsn())
                        WHERE block_ref LIKE '%/' || (SELECT oid FROM pg_database WHERE datname = current_database()) || '/%'""",
                    self.wal0,
                )
        return {
            "app_us": round(cpu / n * 1e6, 1),
            "workers_us": round(workers / self.hz / n * 1e6, 1),
            "pg_us": round(pg / self.hz / n * 1e6, 1),
            "wall_us": round(wall / n * 1e6, 1),
            "batches": round(batches / n, 3),
            "commits": round(counters[0] / n, 3),
            "blocks": round(counters[1] / n, 1),
            "tuples": round(counters[2] / n, 1),
            "wal_bytes": round(float(wal) / n),
            **({"own_wal_bytes": round(own["bytes"] / n), "own_fpi_bytes": round(own["fpi"] / n)} if own else {}),
            "gc_us": round(sum(self.gc_seconds) / n * 1e6, 1),
            "gc2_runs": self.gc_runs[2],
            "objects": len(gc.get_objects()),
        }


async def drive(app, source: Callable[[int], Request], n: int, concurrency: int, expect: tuple[int, ...]) -> int:
    """Issue requests source(0..n-1) from `concurrency` tasks; the number of unexpected answers."""
    counter = iter(range(n))
    errors = 0

    async def worker() -> None:
        nonlocal errors
        for i in counter:
            status, body = await call(app, source(i))
            if status not in expect:
                errors += 1
                if errors <= 3:
                    print(f"    unexpected {status}: {body[:300]!r}", file=sys.stderr)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return errors


async def load_agents(app, specs, tokens, concurrency: int) -> int:
    bodies = [request("PUT", f"/v1/agents/{a.tenant}/{a.agent_id}", tokens[a.tenant], a.card) for a in specs]
    return await drive(app, lambda i: bodies[i], len(bodies), concurrency, (200, 201))


async def main_async(args) -> dict:
    from auth.tokens import mint_caller_token
    from registry.app import create_app
    from registry.config import Settings
    from registry.web.in_process import lifespan_running

    _count_batches()
    name = args.keep or "capreg_cpu_" + secrets.token_hex(4)
    admin = await asyncpg.connect(args.database_url)
    exists = await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
    if not exists:
        await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    url = _with_database(args.database_url, name)
    settings = Settings(database_url=url, home=Path(tempfile.mkdtemp(prefix="capreg-cpu-")))
    application = create_app(settings)
    running = lifespan_running(application)
    await running.__aenter__()
    results: dict[str, dict] = {}
    pool = await asyncpg.create_pool(url, min_size=1, max_size=1)
    try:
        registry = application.state.registry

        def token(tenant: str, sub: str, scopes: list[str], regions=None) -> str:
            return mint_caller_token(
                registry.keyring,
                issuer=settings.issuer,
                audience=settings.audience,
                tenant=tenant,
                sub=sub,
                scopes=scopes,
                regions=regions,
                ttl=24 * 3600,
            )

        scopes = sorted({f"{n}:{m}" for ns in data.DOMAINS.values() for n in ns for m in ("read", "write")})
        reader = token("acme", "bench-router", ["registry:read", *scopes], data.REGIONS)
        publishers = {t: token(t, "bench-publisher", ["registry:publish", "registry:read"]) for t in data.TENANTS}
        loaded = await pool.fetchval("SELECT count(*) FROM agents")
        specs_all = data.agents(args.seed, args.agents)
        if loaded < args.agents:
            t0 = time.perf_counter()
            errors = await load_agents(application, specs_all[loaded:], publishers, 8)
            print(
                f"loaded {args.agents - loaded} agents in {time.perf_counter() - t0:.0f}s ({errors} errors)", flush=True
            )
        specs = specs_all[:400]
        public = [a for a in specs if a.card["visibility"] == "public"][: args.targets]
        mintable = [(a, s) for a in public for s in a.card["skills"] if s["sideEffect"] != "destructive"][
            : args.targets
        ]
        mint_bodies = [
            request(
                "POST",
                "/v1/tickets",
                reader,
                {
                    "audience": f"{a.tenant}/{a.agent_id}",
                    "skill": s["id"],
                    "version": "^" + s["version"].split(".")[0],
                    "scopes": s["scopes"],
                    "ttlSeconds": 300,
                    "maxDepth": 0,
                },
            )
            for a, s in mintable
        ]
        introspections = []
        for (a, _), body in zip(mintable[:50], mint_bodies[:50], strict=False):
            status, answer = await call(application, body)
            if status in (200, 201):
                introspections.append(
                    request(
                        "POST",
                        "/v1/tickets/introspect",
                        publishers[a.tenant],
                        {"ticket": msgspec.json.decode(answer)["ticket"]},
                    )
                )
        beats = [
            request(
                "POST",
                f"/v1/agents/{a.tenant}/{a.agent_id}/heartbeat",
                publishers[a.tenant],
                {
                    "instanceId": f"i-{n}",
                    "url": f"https://{a.agent_id}-{n}.internal",
                    "ttlSeconds": LEASE_TTL,
                    "load": (n * 37 + len(a.agent_id)) % 101 / 100,
                },
            )
            for n in range(5)
            for a in specs
        ]
        reregistrations = [
            request("PUT", f"/v1/agents/{a.tenant}/{a.agent_id}", publishers[a.tenant], a.card) for a in specs
        ]
        # The same cards in other bytes every pass (trailing whitespace, a count drawn per run, then
        # one more on every other pass): each request misses the byte-hash fast path and takes the
        # full path of a registration that changes nothing (what the throughput bench's json.dumps
        # bodies do on their first pass).
        spaces = 10 + secrets.randbelow(1000)
        rebytes = [
            [
                request(
                    "PUT",
                    f"/v1/agents/{a.tenant}/{a.agent_id}",
                    publishers[a.tenant],
                    msgspec.json.encode(a.card) + b" " * (spaces + extra),
                )
                for a in specs
            ]
            for extra in (0, 1)
        ]
        fresh_base = 10_000_000 + secrets.randbelow(10**6) * 1000  # agent indexes never loaded before

        def new_agent(i: int) -> Request:
            a = data.agent(args.seed, fresh_base + i)
            return request("PUT", f"/v1/agents/{a.tenant}/{a.agent_id}", publishers[a.tenant], a.card)

        def cycle(reqs: list[Request]) -> Callable[[int], Request]:
            return lambda i: reqs[i % len(reqs)]

        scenarios: list[tuple[str, Callable[[int], Request], tuple[int, ...], int]] = [
            ("healthz", cycle([request("GET", "/healthz")]), (200,), args.cheap_requests),
            ("discovery", cycle([request("GET", "/v1/capabilities?limit=50")]), (200,), args.cheap_requests),
            (
                "agent_card",
                cycle(
                    [request("GET", f"/v1/agents/{a.tenant}/{a.agent_id}/.well-known/agent-card.json") for a in public]
                ),
                (200,),
                args.cheap_requests,
            ),
            (
                "agent_view",
                cycle([request("GET", f"/v1/agents/{a.tenant}/{a.agent_id}") for a in public]),
                (200,),
                args.cheap_requests,
            ),
            (
                "detail",
                cycle(
                    [
                        request(
                            "GET",
                            f"/v1/agents/{a.tenant}/{a.agent_id}/skills/{a.card['skills'][0]['id']}/versions/latest",
                            reader,
                        )
                        for a in public
                    ]
                ),
                (200,),
                args.requests,
            ),
            ("ticket_mint", cycle(mint_bodies), (200, 201), args.requests),
            (
                # The throughput bench's offers: "verb noun" needs, no ticket.
                "offers",
                cycle(
                    [
                        request("POST", "/v1/offers", reader, {"need": f"{verb} {noun}", "limit": 5})
                        for nouns in data.DOMAINS.values()
                        for noun in nouns
                        for verb in data.VERBS[:4]
                    ]
                ),
                (200,),
                args.requests,
            ),
            ("introspect", cycle(introspections), (200,), args.requests),
            ("heartbeat", cycle(beats), (200,), args.requests),
            ("reregister_unchanged", cycle(reregistrations), (200,), args.requests),
            (
                "reregister_rebytes",
                lambda i: rebytes[(i // len(specs)) % 2][i % len(specs)],
                (200,),
                max(args.requests // 4, 20),
            ),
            ("register_new", new_agent, (201,), max(args.requests // 10, 20)),
        ]
        only = set(args.only.split(",")) if args.only else None
        if only is None or "offers" in only:
            # Offers weigh live instances: every agent gets one for an hour, as a running fleet has.
            fleet = [fleet_beat(a, publishers) for a in specs_all]
            t0 = time.perf_counter()
            errors = await drive(application, lambda i: fleet[i], len(fleet), 8, (200,))
            print(f"{len(fleet)} fleet instances in {time.perf_counter() - t0:.0f}s ({errors} errors)", flush=True)
        meter = Meter(pool, name)
        offset = 0
        for scenario, source, expect, n in scenarios:
            if only is not None and scenario not in only:
                continue
            warm = max(n // 10, 20)
            shifted = (lambda s, o: lambda i: s(i + o))(source, offset)  # new agents stay new
            await drive(application, shifted, warm, args.concurrency, expect)
            offset += warm
            shifted = (lambda s, o: lambda i: s(i + o))(source, offset)
            await meter.start()
            errors = await drive(application, shifted, n, args.concurrency, expect)
            figures = await meter.stop(n)
            offset += n
            results[scenario] = {"requests": n, "errors": errors, **figures}
            print(f"  {scenario:22} {json.dumps(results[scenario])}", flush=True)
        if args.profile_seconds:
            looped = [s for s in scenarios if only is None or s[0] in only]
            print(f"pid {os.getpid()}: looping {[s[0] for s in looped]} for {args.profile_seconds}s", flush=True)
            end = time.monotonic() + args.profile_seconds
            while time.monotonic() < end:
                for _name, source, expect, _ in looped:
                    shifted = (lambda s, o: lambda i: s(i + o))(source, offset)
                    await drive(application, shifted, 200, args.concurrency, expect)
                    offset += 200
    finally:
        await pool.close()
        await running.__aexit__(None, None, None)
        if not args.keep:
            admin = await asyncpg.connect(args.database_url)
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await admin.close()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu_per_request", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--database-url", default=os.environ.get("DATABASE_URL"), required="DATABASE_URL" not in os.environ
    )
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=2000, help="measured requests per scenario")
    parser.add_argument(
        "--cheap-requests", type=int, default=20000, help="measured requests of the cached read paths (tens of µs each)"
    )
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--targets",
        type=int,
        default=200,
        help="distinct agents read, released and minted for (the bench's 200; fewer: more cache hits)",
    )
    parser.add_argument("--only", help="comma-separated scenario names")
    parser.add_argument("--keep", help="database name to keep (and reuse when already loaded)")
    parser.add_argument(
        "--profile-seconds",
        type=float,
        default=0,
        help="then loop the chosen scenarios this long (attach py-spy meanwhile)",
    )
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    loadavg = Path("/proc/loadavg").read_text().split()[:3]
    print(f"load average {' '.join(loadavg)}", flush=True)
    results = asyncio.run(main_async(args))
    print(f"load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])}", flush=True)
    if args.out:
        args.out.write_text(
            json.dumps({"loadavg": loadavg, "args": vars(args) | {"out": str(args.out)}, "results": results}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
