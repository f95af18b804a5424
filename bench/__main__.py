"""`python -m bench`: the capreg performance benchmark.

Starts a baseline (a trivial litestar endpoint on granian) and `capreg serve` as real server
processes against a fresh PostgreSQL, loads a generated data set through the HTTP API, then drives
each scenario from a separate load-generator process (bench/load.py) and reports throughput,
latency, errors and server RSS, each also as a ratio to the baseline measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import msgspec

from bench import data

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"

# Ratio targets to the baseline (2 cores, 1 worker); see docs/performance.md.
TARGETS = {
    "discovery": {"rps": 0.5, "p99": 3.0},
    "conditional": {"rps": 0.8},
    "agent_card": {"rps": 0.6},
    "filtered": {"rps": 0.3},
    "detail": {"rps": 0.3},
    "offers": {"rps": 0.3},
    "ticket_mint": {"rps": 0.2},
    "introspect": {"rps": 0.4},
    "register_versions": {"rps": 0.04},
    "register_agents": {"rps": 0.04},
    "heartbeat": {"rps": 0.3},
    "reregister_unchanged": {"rps": 0.25},
    "agent_view": {"rps": 0.8},
}
# Instances one worker keeps alive at a 30 s lease: the heartbeat rate (8 clients) times 30.
INSTANCES_TARGET = 100_000
LEASE_TTL = 30


# ----------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _admin(server_url: str, sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(server_url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def create_database(server_url: str, prefix: str) -> tuple[str, str]:
    """A fresh database on `server_url`'s server: (its name, its URL)."""
    name = prefix + secrets.token_hex(4)
    asyncio.run(_admin(server_url, f'CREATE DATABASE "{name}"'))
    return name, urlunsplit(urlsplit(server_url)._replace(path="/" + name))


def drop_database(server_url: str, name: str) -> None:
    asyncio.run(_admin(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def serve(env: dict, port: int, workers: int, log: Path) -> subprocess.Popen:
    """`capreg serve` as its own process, its output in `log`."""
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "registry.cli", "serve", "--port", str(port), "--workers", str(workers)],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def wait_ready(url: str, process: subprocess.Popen, log: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"server exited ({process.returncode}):\n{log.read_text()[-4000:]}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"server at {url} not ready after {timeout}s:\n{log.read_text()[-4000:]}")


def stop(process: subprocess.Popen | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    task_dir = Path(f"/proc/{pid}/task")
    for task in task_dir.glob("*") if task_dir.exists() else []:
        try:
            kids += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return kids


def _tree(pid: int) -> list[tuple[int, str]]:
    """A server process and its worker children as (pid, /proc status), PostgreSQL processes excluded."""
    found, stack, seen = [], [pid], set()
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            status = Path(f"/proc/{p}/status").read_text()
        except OSError:
            continue
        name = status.split("\n", 1)[0].split(":", 1)[1].strip()
        if name.startswith("postgres") or name == "pg_ctl":
            continue
        found.append((p, status))
        stack += _children(p)
    return found


def _status_kb(status: str, field_name: str) -> int:
    for line in status.splitlines():
        if line.startswith(field_name):
            return int(line.split()[1])
    return 0


def tree_rss_mb(pid: int) -> float:
    """VmRSS of a server process and its worker children (PostgreSQL processes excluded)."""
    return sum(_status_kb(status, "VmRSS:") for _, status in _tree(pid)) / 1024


# How a schema worker process (registry.core.bounded_work) is told apart in the process tree.
SCHEMA_WORKER_MARK = "registry.core.bounded_work"


def _what(p: int) -> str:
    try:
        cmdline = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "?"
    return "schema worker" if SCHEMA_WORKER_MARK in cmdline else cmdline.strip()[:60]


def tree_memory(pid: int) -> dict:
    """VmRSS and PSS of every process of the tree. VmRSS summed over a parent and the workers it
    forked counts the pages they share (the interpreter, the modules imported before the fork) once
    per process; PSS charges each shared page to its sharers in parts, so its sum is what the tree
    holds of the machine's memory."""
    processes = []
    for p, status in _tree(pid):
        pss_kb = 0
        try:
            pss_kb = _status_kb(Path(f"/proc/{p}/smaps_rollup").read_text(), "Pss:")
        except OSError:
            pass
        processes.append(
            {
                "pid": p,
                "what": _what(p),
                "rss_mb": round(_status_kb(status, "VmRSS:") / 1024, 1),
                "pss_mb": round(pss_kb / 1024, 1),
            }
        )
    return {
        "rss_mb": round(sum(x["rss_mb"] for x in processes), 1),
        "pss_mb": round(sum(x["pss_mb"] for x in processes), 1),
        "processes": processes,
    }


def memory_at_rest(pid: int, wait_seconds: float) -> dict:
    """The tree's memory once the bench's load is over and the schema workers have stopped (they stop
    after the pool's idle time, registry.core.bounded_work.IDLE_SECONDS), waiting at most
    `wait_seconds`: what a registry that served the bench holds while it waits for the next request."""
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline and any(_what(p) == "schema worker" for p, _ in _tree(pid)):
        time.sleep(1.0)
    memory = tree_memory(pid)
    memory["waited_seconds"] = round(wait_seconds - max(0.0, deadline - time.monotonic()), 1)
    memory["schema_workers"] = sum(1 for x in memory["processes"] if x["what"] == "schema worker")
    return memory


class RssSampler:
    """Peak RSS of a process tree, sampled every 250 ms while a scenario runs."""

    def __init__(self, pid: int):
        self.pid, self.peak, self._stop = pid, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_rss_mb(self.pid))
            self._stop.wait(0.25)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, tree_rss_mb(self.pid))


def machine() -> dict:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown",
    )
    mem_kb = next(
        int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")
    )
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory_gb": round(mem_kb / 1024 / 1024, 1),
        "python": platform.python_version(),
        "kernel": platform.release(),
    }


# ----------------------------------------------------------------------------- measuring


@dataclass
class Result:
    name: str
    title: str
    available: bool = True
    note: str = ""
    requests: int = 0
    errors: int = 0
    statuses: dict = field(default_factory=dict)
    rps: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    rss_mb: float = 0.0
    generator_cpu_pct: float = 0.0
    connections: int = 0
    generators: int = 1
    ratios: dict = field(default_factory=dict)
    target: dict = field(default_factory=dict)
    meets_target: bool | None = None
    # The first unexpected answers (head and body), so that a run says what its errors were.
    unexpected: list = field(default_factory=list)


def percentile(sorted_values: list[int], p: float) -> float:
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(round(p / 100 * (len(sorted_values) - 1))))] / 1000


def drive(job: dict, generators: int = 1) -> dict:
    """Run the load generator in `generators` processes (connections split between them) and merge."""
    per = max(1, job["connections"] // generators)
    procs = []
    for _ in range(generators):
        p = subprocess.Popen(
            [sys.executable, "-m", "bench.load"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT
        )
        p.stdin.write(json.dumps({**job, "connections": per}).encode())
        p.stdin.close()
        procs.append(p)
    outs = []
    for p in procs:
        raw = p.stdout.read()
        if p.wait() != 0:
            raise SystemExit("load generator failed")
        outs.append(json.loads(raw))
    latencies = sorted(x for o in outs for x in o["latencies_us"])
    seconds = max(o["seconds"] for o in outs) or 1e-9
    statuses: dict[str, int] = {}
    for o in outs:
        for k, v in o["statuses"].items():
            statuses[k] = statuses.get(k, 0) + v
    return {
        "requests": len(latencies),
        "errors": sum(o["errors"] for o in outs),
        "statuses": statuses,
        "unexpected": [answer for o in outs for answer in o.get("unexpected", [])][:3],
        "rps": len(latencies) / seconds,
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
        # Of one core, averaged over the generator processes.
        "generator_cpu_pct": 100 * sum(o["cpu_seconds"] for o in outs) / sum(o["wall_seconds"] or 1e-9 for o in outs),
    }


def measure(result: Result, job: dict, pid: int, generators: int = 1) -> Result:
    with RssSampler(pid) as rss:
        figures = drive(job, generators)
    for key, value in figures.items():
        setattr(result, key, value)
    result.rss_mb = rss.peak
    result.connections, result.generators = job["connections"], generators
    for answer in result.unexpected:
        print(f"  unexpected answer in {result.name}:\n    " + answer.replace("\r\n", "\n    ")[:1500], flush=True)
    return result


def compare(result: Result, baseline: Result) -> None:
    if not result.available or not result.requests:
        return
    result.ratios = {
        "rps": result.rps / baseline.rps,
        "p50": result.p50_ms / baseline.p50_ms if baseline.p50_ms else None,
        "p99": result.p99_ms / baseline.p99_ms if baseline.p99_ms else None,
    }
    target = TARGETS.get(result.name)
    if target:
        result.target = target
        ok = result.ratios["rps"] >= target["rps"] and result.errors == 0
        if "p99" in target:
            ok = ok and result.ratios["p99"] is not None and result.ratios["p99"] <= target["p99"]
        result.meets_target = ok


# ----------------------------------------------------------------------------- the registry under test


class Capreg:
    """`capreg serve` on a fresh database, and the CLI on the same CAPREG_HOME / DATABASE_URL."""

    def __init__(self, database_url: str | None, workers: int, home: Path, port: int | None = None):
        self.home = home
        self.server_url = database_url
        self.database = None
        self.env = {**os.environ, "CAPREG_HOME": str(home), "PYTHONUNBUFFERED": "1"}
        self.env.pop("DATABASE_URL", None)
        self.workers = workers
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        if self.server_url:
            self.database, self.env["DATABASE_URL"] = create_database(self.server_url, "capreg_bench_")
        log = self.home / "serve.log"
        self.process = serve(self.env, self.port, self.workers, log)
        wait_ready(f"{self.base}/readyz", self.process, log)

    def stop(self) -> None:
        stop(self.process)
        # The embedded server stops when its last user exits: let it finish before its directory goes.
        pid_file = self.home / "pgdata" / "postmaster.pid"
        deadline = time.monotonic() + 15
        while pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.database:
            drop_database(self.server_url, self.database)

    def mint(self, requests: dict[str, tuple[str, str, list[str], list[str] | None]]) -> dict[str, str]:
        """Tokens from `capreg token mint` (name -> (tenant, sub, scopes, regions)), minted in parallel."""
        procs = {}
        for name, (tenant, sub, scopes, regions) in requests.items():
            args = [
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
            ]
            if regions:
                args += ["--regions", ",".join(regions)]
            procs[name] = subprocess.Popen(
                args, env=self.env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        tokens = {}
        for name, proc in procs.items():
            out, err = proc.communicate(timeout=120)
            if proc.returncode != 0:
                raise SystemExit(f"capreg token mint failed: {err}")
            tokens[name] = out.strip()
        return tokens

    def dsn(self) -> tuple[str, object]:
        if self.database:
            return self.env["DATABASE_URL"], None
        from db.embedded import start_embedded

        server = start_embedded(self.home)
        return server.get_uri(), server


async def explain_plans(dsn: str) -> dict[str, str]:
    """EXPLAIN (ANALYZE, BUFFERS) of the discovery queries the scenarios run, via db.capabilities itself."""
    import asyncpg

    from db import capabilities
    from db.pool import create_pool

    class Explaining:
        def __init__(self, pool, run: bool = False):
            self.pool, self.plan, self.run = pool, "", run

        async def fetch(self, sql, *params):
            rows = await self.pool.fetch("EXPLAIN (ANALYZE, BUFFERS) " + sql, *params)
            self.plan = "\n".join(r[0] for r in rows)
            return await self.pool.fetch(sql, *params) if self.run else []

    pool = await create_pool(dsn, min_size=1, max_size=2)
    plans = {}
    try:
        cases = {
            "public first page (limit 50)": dict(viewer_tenant=None, limit=51),
            "tenant viewer first page (limit 50)": dict(viewer_tenant="acme", limit=51),
        }
        for title, kwargs in cases.items():
            conn = Explaining(pool)
            await capabilities.discover(conn, **kwargs, now=dt.datetime.now(dt.UTC))
            plans[title] = conn.plan
        # With q, discovery is ranked search: the engine proposes, the database checks its
        # candidates (registry.discovery.ranking; the costs at 400,000 versions: python -m bench.search_cost).
        from db import ranked_search, search_index
        from registry.search.engine import Proposal, SearchIndex
        from registry.search.index_sync import document

        engine = SearchIndex()
        async with pool.acquire() as raw:
            await search_index.snapshot(raw, lambda rows: engine.replace((), [document(r) for r in rows]))
        hits = engine.propose(["invoice"], Proposal(viewer=None, tags=("finance",), side_effect_max=1))
        conn = Explaining(pool, run=True)
        await ranked_search.checked_page(
            conn, hits[:83], viewer_tenant=None, tags=["finance"], side_effect_max=1, now=dt.datetime.now(dt.UTC)
        )
        plans["filtered (q + tag + sideEffectMax)"] = conn.plan
        # ARD (docs/api.md#ard): search by relevance, explore's facets, the list in identifier order.
        from db import ard
        from registry.core.records import SIDE_EFFECT_NAMES

        latest = await ranked_search.latest_hits(pool, engine.propose(["invoice"], Proposal(viewer=None)))
        invoice = ard.TextMatch(
            tenants=[r.tenant for r in latest],
            agents=[r.agent_id for r in latest],
            scores=[r.score for r in latest],
        )
        conn = Explaining(pool)
        await ard.ranked_page(
            conn,
            viewer_tenant=None,
            where=ard.EntryFilter(),
            text=invoice,
            after=None,
            limit=11,
        )
        plans["ARD search 'invoice' (page of 10)"] = conn.plan
        conn = Explaining(pool)
        await ard.facet_counts(
            conn,
            viewer_tenant=None,
            where=ard.EntryFilter(),
            text=invoice,
            configured={},
            facets=[ard.FacetRequest("tags", 20, 1), ard.FacetRequest("publisher", 20, 1)],
            side_effect_names=SIDE_EFFECT_NAMES,
        )
        plans["ARD explore 'invoice' (tags, publisher)"] = conn.plan
        conn = Explaining(pool)
        await ard.facet_counts(
            conn,
            viewer_tenant=None,
            where=ard.EntryFilter(),
            text=None,
            configured={},
            facets=[ard.FacetRequest("type", 20, 1), ard.FacetRequest("tags", 20, 1)],
            side_effect_names=SIDE_EFFECT_NAMES,
        )
        plans["ARD explore, whole registry (type, tags)"] = conn.plan
        conn = Explaining(pool)
        await ard.identifier_page(
            conn,
            viewer_tenant=None,
            where=ard.EntryFilter(),
            configured={},
            after=None,
            limit=21,
        )
        plans["ARD list, first page of 20"] = conn.plan
    except (asyncpg.PostgresError, TypeError) as exc:
        plans["error"] = repr(exc)
    finally:
        await pool.close()
    return plans


async def durable_commit_ms(dsn: str, commits: int = 200) -> dict[str, float]:
    """Latency of one durable single-row commit on the database under test (p50 and p99 ms), and
    of the same statement writing nothing (no WAL to flush): what bounds a closed-loop client that
    waits for its write to be durable, such as a heartbeat."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    figures = {}
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS bench_commit_probe (id int PRIMARY KEY, at timestamptz)")
        for label, sql in (
            ("write", "INSERT INTO bench_commit_probe VALUES (1, now()) ON CONFLICT (id) DO UPDATE SET at = now()"),
            ("no_write", "SELECT 1 FROM bench_commit_probe WHERE id = -1"),
        ):
            samples = []
            for _ in range(commits):
                started = time.perf_counter()
                await conn.execute(sql)
                samples.append(time.perf_counter() - started)
            samples.sort()
            figures[f"{label}_p50_ms"] = round(samples[len(samples) // 2] * 1000, 3)
            figures[f"{label}_p99_ms"] = round(samples[int(len(samples) * 0.99)] * 1000, 3)
        await conn.execute("DROP TABLE bench_commit_probe")
    finally:
        await conn.close()
    return figures


# ----------------------------------------------------------------------------- scenarios


def filtered_queries(seed: int) -> list[str]:
    import random

    rng = random.Random(seed)
    queries = []
    for domain in sorted(data.DOMAINS):
        for noun in data.DOMAINS[domain]:
            effect = rng.choice(["none", "idempotent", "write"])
            queries.append(f"/v1/capabilities?q={noun}&tag={domain}&sideEffectMax={effect}&limit=50")
    return queries


def openapi_paths(base: str) -> set[str]:
    return set(httpx.get(f"{base}/schema/openapi.json", timeout=10).json()["paths"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--agents", type=int, help="agents to load (3 to 5 skills each; default 1000, 2000 with --replicas)"
    )
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per scenario (default 10)")
    parser.add_argument("--connections", type=int, default=32, help="load-generator connections (default 32)")
    parser.add_argument("--writers", type=int, default=8, help="concurrent registration clients (default 8)")
    parser.add_argument(
        "--workers", type=int, default=1, help="granian workers for capreg and the baseline (default 1)"
    )
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--port", type=int, help="port for capreg serve (default: a free one)")
    parser.add_argument("--baseline-port", type=int, help="port for the baseline endpoint (default: a free one)")
    parser.add_argument("--database-url", help="create a fresh database on this PostgreSQL server (default: embedded)")
    parser.add_argument(
        "--wait-events",
        action="store_true",
        help="with --database-url: sample what PostgreSQL's backends wait for during each scenario (bench/wait_events.py)",
    )
    parser.add_argument(
        "--no-explain", action="store_true", help="skip EXPLAIN (ANALYZE, BUFFERS) of the discovery queries"
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="directory for the JSON results")
    parser.add_argument(
        "--only", help="comma-separated scenario names to run (default: all), e.g. heartbeat,agent_view"
    )
    parser.add_argument(
        "--replicas",
        type=int,
        default=0,
        help="run the several-replicas scenario instead (bench/replicas.py): N capreg serve on one PostgreSQL",
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="with --replicas: registrations of each agent (default 3)"
    )
    parser.add_argument(
        "--noisy-neighbour",
        action="store_true",
        help="run the noisy-neighbour scenario instead (bench/noisy_neighbour.py): one tenant's p99 beside another's costliest requests",
    )
    parser.add_argument(
        "--rest-seconds",
        type=float,
        default=80.0,
        help="after the scenarios, wait at most this long for the schema workers to stop, then measure the "
        "server's memory at rest (default 80: their idle time is 60 s)",
    )
    parser.add_argument(
        "--quiet-connections",
        type=int,
        default=4,
        help="with --noisy-neighbour: the quiet tenant's connections (default 4)",
    )
    args = parser.parse_args(argv)
    if args.noisy_neighbour:
        from bench import noisy_neighbour

        return noisy_neighbour.main(args)
    if args.replicas:
        from bench import replicas

        args.agents = args.agents or 2000
        return replicas.main(args)
    args.agents = args.agents or 1000

    # pgserver keeps a runtime dir under XDG_RUNTIME_DIR and platformdirs warns when it is unset.
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="capreg-bench-run-"))  # mode 0700
    started = time.monotonic()
    warmup = min(1.0, args.duration * 0.2)
    home = Path(tempfile.mkdtemp(prefix="capreg-bench-"))
    baseline_proc = None
    registry = Capreg(args.database_url, args.workers, home, port=args.port)
    results: list[Result] = []
    plans: dict[str, str] = {}
    commit_latency: dict[str, float] = {}
    at_rest: dict = {}
    try:
        # -- baseline
        bport = args.baseline_port or free_port()
        blog = home / "baseline.log"
        with blog.open("w") as out:
            baseline_proc = subprocess.Popen(
                [sys.executable, "-m", "bench.baseline", "--port", str(bport), "--workers", str(args.workers)],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        wait_ready(f"http://127.0.0.1:{bport}/baseline", baseline_proc, blog)
        job = {
            "host": "127.0.0.1",
            "port": bport,
            "connections": args.connections,
            "duration": args.duration,
            "warmup": warmup,
            "requests": [{"method": "GET", "path": "/baseline"}],
        }
        baseline = measure(Result("baseline", "baseline: 1 KB JSON (litestar + granian)"), job, baseline_proc.pid)
        baseline2 = measure(
            Result("baseline_2gen", "baseline, 2 generator processes"), job, baseline_proc.pid, generators=2
        )
        stop(baseline_proc)
        results += [baseline, baseline2]
        print(
            f"baseline: {baseline.rps:,.0f} req/s p99 {baseline.p99_ms:.2f} ms (2 generators: {baseline2.rps:,.0f} req/s)",
            flush=True,
        )

        # -- capreg
        registry.start()
        pid = registry.process.pid
        base = registry.base
        scopes = sorted({f"{n}:{m}" for ns in data.DOMAINS.values() for n in ns for m in ("read", "write")})
        tokens = registry.mint(
            {"reader": ("acme", "bench-router", ["registry:read", *scopes], data.REGIONS)}
            | {t: (t, "bench-publisher", ["registry:publish", "registry:read"], None) for t in data.TENANTS}
        )
        reader = tokens.pop("reader")
        publishers = tokens
        print(f"capreg up at {base} ({time.monotonic() - started:.0f}s); loading {args.agents} agents", flush=True)

        load = {
            "host": "127.0.0.1",
            "port": registry.port,
            "connections": args.writers,
            "duration": 24 * 3600,
            "warmup": 0,
            "expect": [201],
            "registration": {"seed": args.seed, "count": args.agents, "rounds": [0, 0], "tokens": publishers},
        }
        loaded = measure(Result("register_agents", f"register new agents ({args.writers} clients)"), load, pid)
        results.append(loaded)
        print(
            f"loaded {loaded.requests} agents at {loaded.rps:,.0f}/s, {loaded.errors} errors "
            f"({time.monotonic() - started:.0f}s)",
            flush=True,
        )

        paths = openapi_paths(base)
        specs = data.agents(args.seed, min(args.agents, 400))
        public = [a for a in specs if a.card["visibility"] == "public"][:200]
        first_page = "/v1/capabilities?limit=50"
        etag = httpx.get(base + first_page).headers["etag"]

        def job_for(requests, expect=(200,), connections=None):
            return {
                "host": "127.0.0.1",
                "port": registry.port,
                "connections": connections or args.connections,
                "duration": args.duration,
                "warmup": warmup,
                "expect": list(expect),
                "requests": requests,
            }

        only = set(args.only.split(",")) if args.only else None

        def run(name, title, requests, expect=(200,), connections=None):
            if only is not None and name not in only:
                return
            sampler = None
            if args.wait_events and registry.database is not None:
                # What PostgreSQL's backends wait for during this scenario (bench/wait_events.py).
                sampler = subprocess.Popen(
                    [sys.executable, "-m", "bench.wait_events", "--database-url", registry.server_url]
                    + ["--seconds", str(args.duration), "--databases", registry.database],
                    stdout=subprocess.PIPE,
                    cwd=ROOT,
                )
            result = measure(Result(name, title), job_for(requests, expect, connections), pid)
            compare(result, baseline)
            results.append(result)
            print(f"  {title}: {result.rps:,.0f} req/s, p99 {result.p99_ms:.2f} ms, {result.errors} errors", flush=True)
            if sampler is not None:
                waits = json.loads(sampler.communicate()[0])
                print(f"    waits of active backends: {waits['share']} {waits['lock_waits_by_statement']}", flush=True)

        def unavailable(name, title, why):
            results.append(Result(name, title, available=False, note=why))
            print(f"  {title}: not available ({why})", flush=True)

        run("healthz", "capreg floor: GET /healthz (no database)", [{"method": "GET", "path": "/healthz"}])
        run("discovery", "public discovery, first page of 50", [{"method": "GET", "path": first_page}])
        run(
            "filtered",
            "filtered discovery (q + tag + sideEffectMax)",
            [{"method": "GET", "path": p} for p in filtered_queries(args.seed)],
        )
        run(
            "conditional",
            "conditional discovery (If-None-Match hit)",
            [{"method": "GET", "path": first_page, "headers": {"If-None-Match": etag}}],
            expect=(304,),
        )
        run(
            "agent_card",
            "A2A agent card",
            [
                {"method": "GET", "path": f"/v1/agents/{a.tenant}/{a.agent_id}/.well-known/agent-card.json"}
                for a in public
            ],
        )
        run(
            "agent_view",
            "agent view GET /v1/agents/{t}/{a}",
            [{"method": "GET", "path": f"/v1/agents/{a.tenant}/{a.agent_id}"} for a in public],
        )

        # ARD (docs/api.md#ard): the same words as filtered discovery, as ARD searches and facets.
        ard_json = {"Content-Type": "application/json"}
        nouns = sorted({noun for domain in data.DOMAINS for noun in data.DOMAINS[domain]})
        if "/ard/search" in paths:
            run(
                "ard_search",
                "ARD search (text, page of 10)",
                [
                    {
                        "method": "POST",
                        "path": "/ard/search",
                        "headers": ard_json,
                        "body": json.dumps({"query": {"text": noun}, "pageSize": 10}),
                    }
                    for noun in nouns
                ],
            )
            run(
                "ard_explore",
                "ARD explore (text; tags and publisher facets)",
                [
                    {
                        "method": "POST",
                        "path": "/ard/explore",
                        "headers": ard_json,
                        "body": json.dumps(
                            {
                                "query": {"text": noun},
                                "resultType": {"facets": [{"field": "tags"}, {"field": "publisher"}]},
                            }
                        ),
                    }
                    for noun in nouns
                ],
            )
        else:
            unavailable("ard_search", "ARD search (text, page of 10)", "POST /ard/search not served")

        auth = {"Authorization": f"Bearer {reader}"}
        detail_path = "/v1/agents/{tenant}/{agent_id}/skills/{skill_id}/versions/{version}"
        if detail_path in paths:
            run(
                "detail",
                "detail release (token, latest)",
                [
                    {
                        "method": "GET",
                        "path": f"/v1/agents/{a.tenant}/{a.agent_id}/skills/{s['id']}/versions/latest",
                        "headers": auth,
                    }
                    for a in public
                    for s in a.card["skills"][:1]
                ],
            )
        else:
            unavailable("detail", "detail release (token, latest)", "GET " + detail_path + " not served")

        if "/v1/offers" in paths and (only is None or "offers" in only):
            # Offers weigh live instances: every loaded agent gets one for an hour, as a running fleet has.
            fleet = [
                {
                    "method": "POST",
                    "path": f"/v1/agents/{a.tenant}/{a.agent_id}/heartbeat",
                    "headers": {"Authorization": f"Bearer {publishers[a.tenant]}", "Content-Type": "application/json"},
                    "body": json.dumps(
                        {
                            "instanceId": "fleet",
                            "url": f"https://{a.agent_id}.fleet.internal",
                            "ttlSeconds": 3600,
                            "load": data.fleet_load(a),
                        }
                    ),
                }
                for a in data.agents(args.seed, args.agents)
            ]
            beaten = drive({**job_for(fleet), "connections": args.writers, "warmup": 0, "duration": 3600, "once": True})
            print(f"  {beaten['requests']} fleet instances, {beaten['errors']} errors", flush=True)
        if "/v1/offers" in paths:
            needs = [f"{verb} {noun}" for nouns in data.DOMAINS.values() for noun in nouns for verb in data.VERBS[:4]]
            run(
                "offers",
                "offers (POST /v1/offers, need, no ticket)",
                [
                    {
                        "method": "POST",
                        "path": "/v1/offers",
                        "headers": {**auth, "Content-Type": "application/json"},
                        "body": json.dumps({"need": need, "limit": 5}),
                    }
                    for need in needs
                ],
            )
        else:
            unavailable("offers", "offers (POST /v1/offers)", "POST /v1/offers not served")

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
        json_auth = {**auth, "Content-Type": "application/json"}
        if "/v1/tickets" in paths:
            run(
                "ticket_mint",
                "ticket mint",
                [{"method": "POST", "path": "/v1/tickets", "headers": json_auth, "body": b} for b in mint_bodies],
                expect=(200, 201),
            )
        else:
            unavailable("ticket_mint", "ticket mint", "POST /v1/tickets not served")

        if "/v1/tickets/introspect" in paths and "/v1/tickets" in paths:
            introspections = []
            with httpx.Client(base_url=base, headers=json_auth, timeout=30) as http:
                for body in mint_bodies[:50]:
                    minted = http.post("/v1/tickets", content=body)
                    if minted.status_code == 201:
                        tenant = json.loads(body)["audience"].split("/")[0]
                        introspector = publishers[tenant]
                        introspections.append(
                            {
                                "method": "POST",
                                "path": "/v1/tickets/introspect",
                                "headers": {
                                    "Authorization": f"Bearer {introspector}",
                                    "Content-Type": "application/json",
                                },
                                "body": json.dumps({"ticket": minted.json()["ticket"]}),
                            }
                        )
            if introspections:
                run("introspect", "ticket introspection", introspections)
            else:
                unavailable("introspect", "ticket introspection", "no ticket could be minted for it")
        else:
            unavailable("introspect", "ticket introspection", "POST /v1/tickets/introspect not served")

        # -- fleet: heartbeats (5 instances per agent, all tenants), a storm for unregistered agents,
        # and a restart storm of unchanged re-registrations (the cards loaded above, sent again).
        def publisher(a):
            return {"Authorization": f"Bearer {publishers[a.tenant]}", "Content-Type": "application/json"}

        beats = [
            {
                "method": "POST",
                "path": f"/v1/agents/{a.tenant}/{a.agent_id}/heartbeat",
                "headers": publisher(a),
                "body": json.dumps(
                    {
                        "instanceId": f"i-{n}",
                        "url": f"https://{a.agent_id}-{n}.internal",
                        "ttlSeconds": LEASE_TTL,
                        "load": (n * 37 + len(a.agent_id)) % 101 / 100,
                    }
                ),
            }
            for n in range(5)
            for a in specs
        ]
        if only is None or "heartbeat" in only:
            dsn, handle = registry.dsn()
            commit_latency = asyncio.run(durable_commit_ms(dsn))
            del handle
            print(
                f"  durable commit on this database: p50 {commit_latency['write_p50_ms']} ms, p99 {commit_latency['write_p99_ms']} ms "
                f"(nothing written: p50 {commit_latency['no_write_p50_ms']} ms)",
                flush=True,
            )
        run("heartbeat", f"heartbeat ({args.writers} clients)", beats, connections=args.writers)
        if results[-1].name == "heartbeat":
            heartbeats = results[-1]
            instances = Result(
                "instances_per_worker",
                f"instances per worker at ttl {LEASE_TTL} s (heartbeat rate x {LEASE_TTL})",
                rps=heartbeats.rps * LEASE_TTL,
                target={"instances": INSTANCES_TARGET},
                meets_target=heartbeats.rps * LEASE_TTL >= INSTANCES_TARGET and heartbeats.errors == 0,
                note="derived",
            )
            results.append(instances)
            print(f"  {instances.title}: {instances.rps:,.0f}", flush=True)
        run("heartbeat_32", f"heartbeat ({args.connections} connections)", beats)
        run("heartbeat_128", "heartbeat (128 connections)", beats, connections=128)
        if results[-1].name == "heartbeat_128":  # a fleet heartbeats open-loop, many at once: batches fill
            many = results[-1]
            results.append(
                Result(
                    "instances_per_worker_128",
                    f"instances per worker at ttl {LEASE_TTL} s, 128 connections",
                    rps=many.rps * LEASE_TTL,
                    target={"instances": INSTANCES_TARGET},
                    meets_target=many.rps * LEASE_TTL >= INSTANCES_TARGET and many.errors == 0,
                    note="derived",
                )
            )
            print(f"  {results[-1].title}: {results[-1].rps:,.0f}", flush=True)
        ghosts = [
            {
                "method": "POST",
                "path": f"/v1/agents/{a.tenant}/ghost-{a.agent_id}/heartbeat",
                "headers": publisher(a),
                "body": json.dumps({"instanceId": "i-0", "ttlSeconds": LEASE_TTL}),
            }
            for a in specs
        ]
        run(
            "heartbeat_unknown",
            f"heartbeat for unregistered agents, 404 ({args.writers} clients)",
            ghosts,
            expect=(404,),
            connections=args.writers,
        )
        # A restarting agent sends the bytes it sent before: the loader's (bench/load.py encodes each
        # card with msgspec). Until 2026-12-02 this scenario sent json.dumps bytes (same content,
        # other bytes), so every request took the full registration path once, never the
        # unchanged fast path it is named for; that case is measured separately below.
        run(
            "reregister_unchanged",
            f"re-registration of an unchanged card ({args.writers} clients)",
            [
                {
                    "method": "PUT",
                    "path": f"/v1/agents/{a.tenant}/{a.agent_id}",
                    "headers": publisher(a),
                    "body": msgspec.json.encode(a.card).decode(),
                }
                for a in specs
            ],
            connections=args.writers,
        )
        run(
            "reregister_same_content",
            f"re-registration of an unchanged card in other bytes, first time ({args.writers} clients)",
            [
                {
                    "method": "PUT",
                    "path": f"/v1/agents/{a.tenant}/{a.agent_id}",
                    "headers": publisher(a),
                    "body": json.dumps(a.card, indent=1),
                }
                for a in specs
            ],
            connections=args.writers,
        )

        if only is None or "register_versions" in only:
            writes = {
                "host": "127.0.0.1",
                "port": registry.port,
                "connections": args.writers,
                "duration": args.duration,
                "warmup": 0,
                "expect": [201],
                "registration": {"seed": args.seed, "count": args.agents, "rounds": [1, 1000], "tokens": publishers},
            }
            registered = measure(
                Result("register_versions", f"register new versions ({args.writers} clients), agents/s"), writes, pid
            )
            compare(registered, baseline)
            results.append(registered)
            print(
                f"  new versions: {registered.rps:,.1f} agents/s, p99 {registered.p99_ms:.1f} ms, {registered.errors} errors",
                flush=True,
            )
        compare(loaded, baseline)

        if not args.no_explain:
            dsn, handle = registry.dsn()
            plans = asyncio.run(explain_plans(dsn))
            del handle
        at_rest = memory_at_rest(pid, args.rest_seconds)
        print(
            f"  memory at rest after the bench ({at_rest['schema_workers']} schema workers, waited "
            f"{at_rest['waited_seconds']:.0f} s): RSS {at_rest['rss_mb']:.0f} MB summed, PSS {at_rest['pss_mb']:.0f} MB; "
            + ", ".join(
                f"{x['what'].split(' --')[0]} {x['rss_mb']:.0f}/{x['pss_mb']:.0f}" for x in at_rest["processes"]
            ),
            flush=True,
        )
    finally:
        stop(baseline_proc)
        registry.stop()
        # A 5xx is a defect, not a load effect: keep the server's log beside the results to read it.
        if any(str(code).startswith("5") for r in results for code in r.statuses):
            args.out.mkdir(parents=True, exist_ok=True)
            kept = args.out / "serve.log"
            shutil.copyfile(home / "serve.log", kept)
            print(f"a scenario had 5xx answers; the server's log is kept in {kept}", flush=True)
        shutil.rmtree(home, ignore_errors=True)

    report = {
        "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "database_url"}
        | {"database": "external" if args.database_url else "embedded", "warmup_seconds": warmup},
        "elapsed_seconds": round(time.monotonic() - started, 1),
        "results": [r.__dict__ for r in results],
        "explain": plans,
        "durable_commit": commit_latency,
        "memory_at_rest": at_rest,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(report, indent=2))
    print()
    print(table(results, args))
    if at_rest:
        print(
            f"memory at rest after the bench: RSS {at_rest['rss_mb']:.0f} MB summed over the server's processes, "
            f"PSS {at_rest['pss_mb']:.0f} MB ({at_rest['schema_workers']} schema workers left)"
        )
    print(f"\n{report['elapsed_seconds']:.0f}s; results in {path}")
    return 0


def table(results: list[Result], args) -> str:
    head = f"{'scenario':<52} {'req/s':>9} {'x base':>7} {'p50 ms':>8} {'x base':>7} {'p99 ms':>8} {'x base':>7} {'errors':>6} {'RSS MB':>7} {'gen CPU':>7}  target"
    lines = [
        f"capreg benchmark: {args.agents} agents, {args.duration:g}s per scenario, {args.connections} connections, {args.workers} worker(s)",
        head,
        "-" * len(head),
    ]
    for r in results:
        if not r.available:
            lines.append(f"{r.title:<52} {'not available':>9}  ({r.note})")
            continue
        ratio = lambda k, r=r: f"{r.ratios[k]:.2f}" if r.ratios.get(k) is not None else "-"  # noqa: E731
        if r.name.startswith("instances_per_worker"):
            verdict = ("ok" if r.meets_target else "MISS") + f" (>= {r.target['instances']:,})"
            lines.append(f"{r.title:<52} {r.rps:>9,.0f}  {verdict}")
            continue
        verdict = (
            ""
            if r.meets_target is None
            else ("ok" if r.meets_target else "MISS")
            + f" (>= {r.target['rps']}x"
            + (f", p99 <= {r.target['p99']}x)" if "p99" in r.target else ")")
        )
        lines.append(
            f"{r.title:<52} {r.rps:>9,.1f} {ratio('rps'):>7} {r.p50_ms:>8.2f} {ratio('p50'):>7} {r.p99_ms:>8.2f} "
            f"{ratio('p99'):>7} {r.errors:>6} {r.rss_mb:>7.0f} {r.generator_cpu_pct:>6.0f}%  {verdict}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
