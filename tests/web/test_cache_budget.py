"""Per-process caches are bounded in bytes (docs/security.md#cache-budget): the pure accounting of
registry.core.response_cache and registry.core.cache_budget, and a real `capreg serve` worker whose RSS stays
within CAPREG_CACHE_BUDGET plus a fixed margin while every cache is flooded with distinct keys."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import httpx
import pytest

from auth.tokens import VerifiedTokens
from registry.core.cache_budget import SHARES, ByteBoundedMemo, share
from registry.core.response_cache import CachedResponse, ResponseCache
from tests.conftest import example, server_home, start_server, stop_server

BILLING = example("billing-agent.json")
BUDGET = 8 * 1024 * 1024
MARGIN = 64 * 1024 * 1024


def _entry(size: int, seq: int = 1, expires: float = 1e12) -> CachedResponse:
    return CachedResponse(body=b"x" * size, etag="e", seq=seq, expires=expires)


def test_the_shares_make_the_whole_budget():
    assert abs(sum(SHARES.values()) - 1.0) < 1e-9
    assert sum(share(BUDGET, name) for name in SHARES) <= BUDGET


def test_a_response_cache_keeps_within_its_bytes_least_recently_used_first():
    cache = ResponseCache(max_bytes=1_000_000)
    for n in range(1000):
        cache.put(("k", n), _entry(10_000), 1, now=0.0)
        assert cache.bytes <= cache.max_bytes
    assert 50 < len(cache) < 100
    assert cache.get(("k", 999), 1, 0.0) is not None and cache.get(("k", 0), 1, 0.0) is None
    cache.put("huge", _entry(400_000), 1, now=0.0)  # over a quarter of the budget: never kept
    assert cache.get("huge", 1, 0.0) is None


def test_expired_entries_go_before_live_ones_and_when_met():
    cache = ResponseCache(max_bytes=130_000)
    cache.put("old", _entry(30_000, expires=5.0), 1, now=0.0)
    cache.put("live", _entry(30_000), 1, now=0.0)
    assert cache.get("old", 1, 10.0) is None and "old" not in cache._entries
    cache.put("stale", _entry(30_000, expires=5.0), 1, now=0.0)
    for key in ("new", "newer", "newest"):  # the last is over the budget: the expired entry goes, not "live"
        cache.put(key, _entry(30_000), 1, now=12.0)
    assert set(cache._entries) == {"live", "new", "newer", "newest"} and cache.bytes <= cache.max_bytes


def test_verified_tokens_and_compiled_schemas_are_bounded_in_bytes():
    tokens = VerifiedTokens(max_bytes=1_000_000)
    for n in range(500):
        tokens.put(f"{n:05d}" + "t" * 15_000, "caller", object(), iss="i", kid="k", exp=1e12)
        assert tokens.bytes <= tokens.max_bytes
    assert len(tokens) < 70
    memo = ByteBoundedMemo(lambda text: text.upper(), max_bytes=1_000_000)
    for n in range(500):
        memo(f"{n}" + "s" * 10_000)
        assert memo.bytes <= memo.max_bytes


# --- a real worker under floods ------------------------------------------------------------------


def _tree_rss(pid: int) -> int:
    """VmRSS in bytes of `pid` and its descendants (granian's workers are child processes)."""
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        total += next(int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS:"))
        todo += [int(c) for c in children]
    return total


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


@pytest.fixture
def flooded_server(database_url, monkeypatch):
    monkeypatch.setenv("CAPREG_CACHE_BUDGET", str(BUDGET))
    home = server_home()
    process, base, env = start_server(home, database_url)
    yield process, base
    stop_server(process)
    shutil.rmtree(home, ignore_errors=True)


@pytest.mark.timeout(400)  # a real server and about 700 requests: minutes on a loaded 2-core machine
async def test_a_worker_stays_within_its_cache_budget_under_floods_of_distinct_keys(flooded_server, mint, tenant):
    process, base = flooded_server
    publisher = mint(tenant, "p", "registry:publish")
    with httpx.Client(base_url=base, timeout=120) as http:
        for agent in ("big-a", "big-b"):
            body = {**BILLING, "visibility": "public", "skills": [_big_skill(n) for n in range(128)]}
            response = http.put(f"/v1/agents/{tenant}/{agent}", json=body, headers=publisher)
            assert response.status_code == 201, response.text
        reader = mint(tenant, "r", "registry:read")

        def flood(round_: int) -> None:
            """Every cache flooded with keys no earlier round used."""
            # Ranked search: the engine indexes the big agents (its memory is not a cache's).
            assert http.get("/v1/capabilities", params={"tenant": tenant, "q": f"skill r{round_}"}).status_code == 200
            # Discovery: regions no capability lists share one entry; every page size is a distinct big page.
            for n in range(40):
                params = {"tenant": tenant, "region": f"r{round_}-{n}", "limit": 200}
                assert http.get("/v1/capabilities", params=params).status_code == 200
                limit = 200 - 40 * round_ - n
                assert http.get("/v1/capabilities", params={"tenant": tenant, "limit": limit}).status_code == 200
            # Public cards: the Host header never makes another entry.
            for n in range(100):
                host = {"Host": f"h{round_}-{n}.example"}
                response = http.get(f"/v1/agents/{tenant}/big-b/.well-known/agent-card.json", headers=host)
                assert response.status_code == 200
            # Release rows: every skill id, existing or not, behind an agent with a big card.
            for n in range(200):
                skill = f"big.s{n:03d}" if round_ else f"big.w{n:03d}"
                http.get(f"/v1/agents/{tenant}/big-{'ab'[n % 2]}/skills/{skill}/versions/latest", headers=reader)
            # Verified tokens: distinct long tokens.
            for n in range(200):
                token = mint(tenant, f"flood-{round_}-{n}", [f"scope-{n}-{k}:" + "y" * 100 for k in range(100)])
                assert http.get("/v1/capabilities", params={"limit": 1}, headers=token).status_code == 200

        # A first flood warms every path, the engine and the allocator's arenas (RSS peaks and falls
        # back as large answers are freed); the second, of new keys, is what a bound must hold.
        flood(0)
        before = _tree_rss(process.pid)
        started = time.monotonic()
        flood(1)
        after = _tree_rss(process.pid)
        # The card's interface URL is the listen address, not the Host sent.
        card = http.get(
            f"/v1/agents/{tenant}/big-b/.well-known/agent-card.json", headers={"Host": "evil.example"}
        ).json()
        assert card["supportedInterfaces"][0]["url"] == f"{base}/v1/agents/{tenant}/big-b"
    growth = after - before
    print(
        f"worker RSS {before / 2**20:.0f} MiB -> {after / 2**20:.0f} MiB (+{growth / 2**20:.0f} MiB) "
        f"in {time.monotonic() - started:.1f} s with CAPREG_CACHE_BUDGET={BUDGET // 2**20} MiB"
    )
    assert growth <= BUDGET + MARGIN, f"RSS grew {growth / 2**20:.0f} MiB"
