"""Memory under floods of distinct cache keys, and the size of a detail with many leases
(docs/security.md#cache-budget): one `capreg serve` worker, its RSS after each flood.

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test python -m bench.memory_floods [--source DIR]

`--source` serves another checkout of capreg (e.g. an older commit unpacked with `git archive`) to
measure before and after; the flooding client is this one. A few tens of seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import asyncpg
import httpx

from auth.tokens import mint_caller_token
from bench.__main__ import ROOT, create_database, drop_database, free_port, stop, tree_rss_mb, wait_ready
from db.pool import create_pool
from registry.core.signing_keys import load_keyring

BILLING = json.loads((ROOT / "tests" / "examples" / "billing-agent.json").read_text())
TENANT = "flood"


def _big_skill(n: int) -> dict:
    return {
        **BILLING["skills"][0],
        "id": f"big.s{n:03d}",
        "name": f"skill {n}",
        "description": "d" * 3500,
        "tags": [f"tag{t:02d}-" + "x" * 55 for t in range(32)],
        "scopes": [],
        "dataRegions": [],
        "examples": [],
    }


async def _minter(dsn: str):
    pool = await create_pool(dsn, min_size=1, max_size=1)
    keyring = await load_keyring(pool)
    await pool.close()

    def mint(sub: str, scopes: list[str]) -> dict:
        token = mint_caller_token(keyring, issuer="capreg", audience="capreg", tenant=TENANT, sub=sub, scopes=scopes)
        return {"Authorization": f"Bearer {token}"}

    return mint


async def _leases(dsn: str, count: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            """INSERT INTO agent_instances (tenant, agent_id, instance_id, url, load, expires_at)
               SELECT $1, 'big-a', 'i-' || lpad(n::text, 5, '0'), 'https://b' || n || '.example/a2a', (n % 100) / 100.0,
                      now() + interval '1 hour'
                 FROM generate_series(1, $2) n ON CONFLICT DO NOTHING""",
            TENANT,
            count,
        )
    finally:
        await conn.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.memory_floods")
    parser.add_argument("--source", type=Path, default=ROOT, help="the capreg checkout to serve")
    parser.add_argument("--budget", type=int, default=None, help="CAPREG_CACHE_BUDGET for the server, bytes")
    args = parser.parse_args(argv)
    server_url = os.environ.get("DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test"
    name, dsn = create_database(server_url, "capreg_floods_")
    home = Path(tempfile.mkdtemp(prefix="capreg-floods-"))
    port = free_port()
    env = {**os.environ, "DATABASE_URL": dsn, "CAPREG_HOME": str(home), "PYTHONPATH": str(args.source)}
    if args.budget is not None:
        env["CAPREG_CACHE_BUDGET"] = str(args.budget)
    log = home / "serve.log"
    process = None
    try:
        with log.open("w") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "registry.cli", "serve", "--port", str(port)],
                env=env,
                cwd=args.source,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        base = f"http://127.0.0.1:{port}"
        wait_ready(base + "/readyz", process, log)
        mint = asyncio.run(_minter(dsn))
        figures: dict[str, float] = {}
        with httpx.Client(base_url=base, timeout=120) as http:
            for agent in ("big-a", "big-b"):
                body = {**BILLING, "visibility": "public", "skills": [_big_skill(n) for n in range(128)]}
                response = http.put(f"/v1/agents/{TENANT}/{agent}", json=body, headers=mint("p", ["registry:publish"]))
                assert response.status_code == 201, response.text
            reader = mint("r", ["registry:read"])
            for _ in range(3):
                http.get("/v1/capabilities", params={"tenant": TENANT, "limit": 200})
                http.get(f"/v1/agents/{TENANT}/big-a/.well-known/agent-card.json")
                http.get(f"/v1/agents/{TENANT}/big-a/skills/big.s000/versions/latest", headers=reader)
            figures["start"] = tree_rss_mb(process.pid)
            started = time.monotonic()
            for n in range(30):
                http.get("/v1/capabilities", params={"tenant": TENANT, "region": f"r{n}", "limit": 200})
            figures["after 30 discovery calls differing in region"] = tree_rss_mb(process.pid)
            for n in range(30):
                http.get("/v1/capabilities", params={"tenant": TENANT, "limit": 171 + n})
            figures["after 30 discovery pages of distinct sizes"] = tree_rss_mb(process.pid)
            for n in range(100):
                http.get(f"/v1/agents/{TENANT}/big-b/.well-known/agent-card.json", headers={"Host": f"h{n}.example"})
            figures["after 100 public cards with distinct Host"] = tree_rss_mb(process.pid)
            for n in range(200):
                http.get(f"/v1/agents/{TENANT}/big-{'ab'[n % 2]}/skills/big.s{n:03d}/versions/latest", headers=reader)
            figures["after 200 detail releases of distinct skills"] = tree_rss_mb(process.pid)
            for n in range(300):
                http.get(
                    "/v1/capabilities",
                    params={"limit": 1},
                    headers=mint(f"flood-{n}", [f"scope-{n}-{k}:" + "y" * 100 for k in range(100)]),
                )
            figures["after 300 distinct 12 KiB tokens"] = tree_rss_mb(process.pid)
            flood_seconds = time.monotonic() - started
            asyncio.run(_leases(dsn, 2500))
            time.sleep(1.1)  # the release cache's 1 s bound on lease freshness
            detail = http.get(f"/v1/agents/{TENANT}/big-a/skills/big.s001/versions/latest", headers=reader)
            assert detail.status_code == 200, detail.text
            for n in range(60):
                http.get(f"/v1/agents/{TENANT}/big-a/skills/big.s{n:03d}/versions/latest", headers=reader)
                time.sleep(0.02)
            figures["after 60 detail calls with 2,500 leases"] = tree_rss_mb(process.pid)
        print(
            f"source: {args.source}  flood: {flood_seconds:.1f} s  detail with 2,500 leases: {len(detail.content):,} bytes"
        )
        for label, mb in figures.items():
            print(f"  {label:48s} {mb:8.0f} MB  (+{mb - figures['start']:.0f})")
    finally:
        stop(process)
        drop_database(server_url, name)
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
