"""429 rate_limited: a token bucket per bearer token (or client address), off unless configured."""

from __future__ import annotations

import tempfile
from pathlib import Path

from registry.config import Settings, load_settings
from registry.rate_limit import TokenBuckets
from tests.conftest import running_app


def test_buckets_allow_a_burst_then_the_rate():
    buckets = TokenBuckets(rate=2.0, burst=3)
    assert [buckets.take(b"k", 0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take(b"k", 0.0) == 0.5  # one token every half second
    assert buckets.take(b"other", 0.0) == 0.0  # keys are independent
    assert buckets.take(b"k", 0.5) == 0.0
    assert buckets.take(b"k", 0.5) > 0


def test_rate_limit_is_read_from_the_environment():
    settings = load_settings({"CAPREG_RATE_LIMIT": "2.5", "CAPREG_RATE_BURST": "10"})
    assert settings.rate_limit == 2.5 and settings.rate_burst == 10
    assert load_settings({}).rate_limit == 0


async def test_over_the_limit_is_429_with_retry_after(database_url, mint, tenant):
    settings = Settings(database_url=database_url, home=Path(tempfile.mkdtemp(prefix="capreg-home-")),
                        rate_limit=0.5, rate_burst=3)
    async with running_app(settings) as (_, client):
        headers = mint(tenant, "router", "registry:read")
        statuses = [(await client.get("/v1/capabilities", headers=headers)).status_code for _ in range(3)]
        assert statuses == [200, 200, 200]
        limited = await client.get("/v1/capabilities", headers=headers)
        assert limited.status_code == 429
        assert limited.headers["content-type"].startswith("application/problem+json")
        assert limited.json()["code"] == "rate_limited" and limited.json()["traceId"]
        assert int(limited.headers["retry-after"]) >= 1
        # Another caller has its own bucket; probes are never limited.
        assert (await client.get("/v1/capabilities", headers=mint(tenant, "other", "registry:read"))).status_code == 200
        assert (await client.get("/healthz", headers=headers)).status_code == 200
