"""The noisy-neighbour scenario (`bench/run --noisy-neighbour`): can one tenant slow another?

A quiet tenant's router runs discovery and ticket mints, and their p99 is measured three times on
the same server: alone; while a second (noisy) tenant sends the costliest requests it can (slow-but-
allowed schemas through validation and compatibility checks, the biggest discovery pages), each kind
alone and all together; and with the noisy tenant's auditor looping on `GET /v1/audit/chain` as well. Target: the quiet p99 with the
neighbour within 3x of the p99 alone (docs/performance.md#noisy-neighbour).

Issue 35's three stall routes are scenarios too, each sent anonymously (or as the noisy tenant) and
worded differently every time so no cache answers: cold ranked queries (discovery, ARD search, MCP
`search_capabilities`, offers), one-typo words, and ARD list filters at their most values. The quiet
tenant's detail release, ticket mint and heartbeat are measured beside them. Reads past the read
admission are shed (503 with Retry-After, registry.core.read_admission): counted as answers.
Meant for 20,000 agents or more (`--agents 20000`); not yet run at that size (docs/security.md#round-4).

The noisy tenant's load is closed-loop on a few connections (a rate limit would only lower it), in
its own load-generator process, started before and stopped after each measured phase.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench import data
from bench.__main__ import ROOT, Capreg, Result, measure

TARGET_P99_RATIO = 3.0
NOISY, QUIET = "noisy", "quiet"


def exponential_validation(levels: int) -> dict:
    """Validating a non-string against this costs jsonschema-rs 2^levels steps (anyOf over shared
    $refs): slow, and allowed (tests/web/test_hostile_schemas.py)."""
    defs = {
        f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}", "minimum": 0}]}
        for i in range(levels)
    }
    defs[f"d{levels}"] = {"type": "string"}
    return {"type": "object", "$defs": defs, "properties": {"x": {"$ref": "#/$defs/d0"}}}


def slow_patterns(count: int) -> dict:
    """A schema whose compilation costs ~35 ms of CPU per pattern (large Unicode classes)."""
    return {
        "type": "object",
        "properties": {
            f"p{i}": {"type": "string", "pattern": rf"^[\p{{L}}\p{{N}}_]{{1,64}}$|{i}"} for i in range(count)
        },
    }


def _skill(schema: dict, version: str = "1.0.0") -> dict:
    return {
        "id": "heavy.skill",
        "name": "Heavy",
        "description": "A slow-but-allowed schema.",
        "version": version,
        "sideEffect": "none",
        "scopes": [],
        "inputSchema": schema,
        "outputSchema": {"type": "object"},
    }


STALL_REQUESTS = 2000  # distinct wordings per stall route: the per-process caches never answer twice


def stall_routes(noisy_token: str) -> tuple[list[dict], list[dict], list[dict]]:
    """Issue 35 item 3's reproductions as load-generator requests: cold ranked queries through every
    ranked path, one-typo words, and ARD list filters with as many unanchored values as allowed."""
    words = sorted({w for ns in data.DOMAINS.values() for n in ns for w in n.replace(".", " ").split()}) or ["invoice"]
    noisy = {"Authorization": f"Bearer {noisy_token}", "Content-Type": "application/json"}
    cold, typos, filters = [], [], []
    for i in range(STALL_REQUESTS):
        a, b = words[i % len(words)], words[(i * 7 + 3) % len(words)]
        text = f"{a} {b} w{i}"
        kind = i % 4
        if kind == 0:
            cold.append({"method": "GET", "path": f"/v1/capabilities?q={text.replace(' ', '+')}&limit=50"})
        elif kind == 1:
            cold.append(
                {
                    "method": "POST",
                    "path": "/ard/search",
                    "headers": {"Content-Type": "application/json"},
                    "body": json.dumps({"query": {"text": text}}),
                }
            )
        elif kind == 2:
            arguments = {"name": "search_capabilities", "arguments": {"q": text}}
            cold.append(
                {
                    "method": "POST",
                    "path": "/mcp",
                    "headers": {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"},
                    "body": json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": arguments}),
                }
            )
        else:
            cold.append({"method": "POST", "path": "/v1/offers", "headers": noisy, "body": json.dumps({"need": text})})
        # One typing error in a word of five letters or more, a new one each time.
        word = max((a, b), key=len) + "abcde"[: max(0, 5 - len(max((a, b), key=len)))]
        at = i % (len(word) - 1)
        typo = word[:at] + word[at + 1] + word[at] + word[at + 2 :] + f" x{i}"
        typos.append({"method": "GET", "path": f"/v1/capabilities?q={typo.replace(' ', '+')}"})
        values = ",".join(f"{words[(i + j) % len(words)][:3]}{j}" for j in range(32))
        filters.append({"method": "GET", "path": f"/ard/agents?filter=displayName%3D%27{values}%27&pageSize=100"})
    return cold, typos, filters


def main(args) -> int:
    agents = args.agents or 300
    duration = args.duration
    home = Path(tempfile.mkdtemp(prefix="capreg-bench-noisy-"))
    registry = Capreg(args.database_url, args.workers, home)
    started = time.monotonic()
    results: list[Result] = []
    neighbour: subprocess.Popen | None = None
    try:
        registry.start()
        base, pid = registry.base, registry.process.pid
        scopes = sorted({f"{n}:{m}" for ns in data.DOMAINS.values() for n in ns for m in ("read", "write")})
        tokens = registry.mint(
            {
                "router": (QUIET, "router", ["registry:read", *scopes], data.REGIONS),
                "noisy_publisher": (NOISY, "publisher", ["registry:publish", "registry:read"], None),
                "noisy_auditor": (NOISY, "auditor", ["audit:read"], None),
            }
            | {t: (t, "bench-publisher", ["registry:publish", "registry:read"], None) for t in data.TENANTS}
        )
        publishers = {t: tokens[t] for t in data.TENANTS}
        load = {
            "host": "127.0.0.1",
            "port": registry.port,
            "connections": args.writers,
            "duration": 24 * 3600,
            "warmup": 0,
            "expect": [201],
            "registration": {"seed": args.seed, "count": agents, "rounds": [0, 0], "tokens": publishers},
        }
        loaded = measure(Result("register_agents", "register agents"), load, pid)
        print(f"capreg up, {loaded.requests} agents loaded ({time.monotonic() - started:.0f}s)", flush=True)

        noisy = {"Authorization": f"Bearer {tokens['noisy_publisher']}", "Content-Type": "application/json"}
        with httpx.Client(base_url=base, timeout=60) as http:
            card = {
                "name": "Heavy",
                "description": "Slow schemas.",
                "version": "1.0.0",
                "visibility": "tenant",
                "skills": [_skill(exponential_validation(22))],
            }
            created = http.put(f"/v1/agents/{NOISY}/heavy", json=card, headers=noisy)
            assert created.status_code in (200, 201), created.text
        validate = {
            "method": "POST",
            "path": f"/v1/agents/{NOISY}/heavy/skills/heavy.skill/versions/1.0.0/validate",
            "headers": noisy,
            "body": json.dumps({"arguments": {"x": 5}, "mode": "strict"}),
        }
        compatibility = {
            "method": "POST",
            "path": "/v1/compatibility",
            "headers": noisy,
            "body": json.dumps({"old": _skill(slow_patterns(12)), "new": _skill(slow_patterns(13), "1.1.0")}),
        }
        big_page = {"method": "GET", "path": "/v1/capabilities?limit=200&versions=all", "headers": noisy}
        cold_ranked, typos, filters = stall_routes(tokens["noisy_publisher"])
        chain = {
            "method": "GET",
            "path": "/v1/audit/chain",
            "headers": {"Authorization": f"Bearer {tokens['noisy_auditor']}"},
        }

        router = {"Authorization": f"Bearer {tokens['router']}"}
        specs = [a for a in data.agents(args.seed, min(agents, 400)) if a.card["visibility"] == "public"][:100]
        mintable = [(a, s) for a in specs for s in a.card["skills"] if s["sideEffect"] != "destructive"][:100]
        mints = [
            {
                "method": "POST",
                "path": "/v1/tickets",
                "headers": {**router, "Content-Type": "application/json"},
                "body": json.dumps(
                    {
                        "audience": f"{a.tenant}/{a.agent_id}",
                        "skill": s["id"],
                        "version": "^" + s["version"].split(".")[0],
                        "scopes": s["scopes"],
                        "ttlSeconds": 300,
                        "maxDepth": 0,
                    }
                ),
            }
            for a, s in mintable
        ]
        details = [
            {
                "method": "GET",
                "path": f"/v1/agents/{a.tenant}/{a.agent_id}/skills/{s['id']}/versions/{s['version']}",
                "headers": router,
            }
            for a, s in mintable
        ]
        heartbeats = [
            {
                "method": "POST",
                "path": f"/v1/agents/{a.tenant}/{a.agent_id}/heartbeat",
                "headers": {"Authorization": f"Bearer {publishers[a.tenant]}", "Content-Type": "application/json"},
                "body": json.dumps({"instanceId": "bench-quiet", "ttlSeconds": 300}),
            }
            for a in specs
        ]
        quiet = {
            "discovery": ([{"method": "GET", "path": "/v1/capabilities?limit=50", "headers": router}], (200,)),
            "ticket": (mints, (200, 201)),
            "detail": (details, (200,)),
            "heartbeat": (heartbeats, (200,)),
        }
        mixes = {
            "alone": None,
            "schemas": [validate, compatibility],  # the parts, to tell which one costs the quiet tenant
            "pages": [big_page],
            "neighbour": [validate, compatibility, big_page],
            "neighbour_chain": [validate, compatibility, big_page, chain],
            # Issue 35's stall routes (module docstring), each alone: held to the same target.
            "neighbour_cold_ranked": cold_ranked,
            "neighbour_typos": typos,
            "neighbour_filters": filters,
        }
        warmup = min(1.0, duration * 0.2)
        for mix, noise in mixes.items():
            if noise is not None:
                job = {
                    "host": "127.0.0.1",
                    "port": registry.port,
                    # The stall routes list thousands of wordings: as many in flight as the review had (10-12).
                    "connections": min(2 * len(noise), 12),
                    "duration": 24 * 3600,
                    "warmup": 0,
                    "expect": [200, 400, 429, 503],
                    "requests": noise,
                }
                neighbour = subprocess.Popen(
                    [sys.executable, "-m", "bench.load"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, cwd=ROOT
                )
                neighbour.stdin.write(json.dumps(job).encode())
                neighbour.stdin.close()
                time.sleep(1.0)  # the neighbour's workers are busy before measuring starts
            for kind, (requests, expect) in quiet.items():
                job = {
                    "host": "127.0.0.1",
                    "port": registry.port,
                    "connections": args.quiet_connections,
                    "duration": duration,
                    "warmup": warmup,
                    "expect": list(expect),
                    "requests": requests,
                }
                result = measure(Result(f"{kind}_{mix}", f"quiet tenant {kind}, {mix.replace('_', ' + ')}"), job, pid)
                results.append(result)
                print(
                    f"  {result.title}: {result.rps:,.0f} req/s, p50 {result.p50_ms:.1f} ms, p99 {result.p99_ms:.1f} ms, "
                    f"{result.errors} errors",
                    flush=True,
                )
            if neighbour is not None:
                neighbour.kill()
                neighbour.wait()
                neighbour = None
        alone = {r.name.split("_")[0]: r for r in results if r.name.endswith("_alone")}
        # only the whole neighbour is held to the target; its parts show where the cost comes from
        for r in results:
            if r.name.endswith("_alone"):
                continue
            reference = alone[r.name.split("_")[0]]
            r.ratios = {
                "p99": r.p99_ms / reference.p99_ms if reference.p99_ms else None,
                "rps": r.rps / reference.rps if reference.rps else None,
            }
            if "_neighbour" in r.name:
                r.target = {"p99": TARGET_P99_RATIO}
                r.meets_target = r.ratios["p99"] is not None and r.ratios["p99"] <= TARGET_P99_RATIO and r.errors == 0
    finally:
        if neighbour is not None:
            neighbour.kill()
        registry.stop()
        shutil.rmtree(home, ignore_errors=True)

    report = {
        "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "scenario": "noisy_neighbour",
        "config": {
            "agents": agents,
            "duration": duration,
            "quiet_connections": args.quiet_connections,
            "workers": args.workers,
        },
        "elapsed_seconds": round(time.monotonic() - started, 1),
        "results": [r.__dict__ for r in results],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"noisy-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(report, indent=2))
    print()
    print(f"{'scenario':<48} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'p99 x alone':>11}  target")
    for r in results:
        ratio = f"{r.ratios['p99']:.2f}" if r.ratios.get("p99") is not None else "-"
        verdict = (
            "" if r.meets_target is None else ("ok" if r.meets_target else "MISS") + f" (<= {TARGET_P99_RATIO:g}x)"
        )
        print(f"{r.title:<48} {r.rps:>8,.1f} {r.p50_ms:>8.2f} {r.p99_ms:>8.2f} {ratio:>11}  {verdict}")
    print(f"\n{report['elapsed_seconds']:.0f}s; results in {path}")
    return 0
