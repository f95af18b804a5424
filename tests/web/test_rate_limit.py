"""429 rate_limited: a token bucket per verified identity (or client address), off unless configured."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from registry.config import Settings, load_settings
from registry.web.rate_limit import TokenBuckets, client_address, trusted_networks
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
    settings = Settings(
        database_url=database_url, home=Path(tempfile.mkdtemp(prefix="capreg-home-")), rate_limit=0.5, rate_burst=3
    )
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


# ---------------------------------------------------------------------------
# Keyed on verified identity; bounded memory; proxies believed only when trusted


def test_buckets_are_bounded_and_evict_the_idlest_one_at_a_time():
    buckets = TokenBuckets(rate=1.0, burst=1, max_buckets=3)
    buckets.take("a", 0.0)
    assert buckets.take("a", 0.0) > 0  # a is empty
    for key in ("b", "c", "d"):  # a flood of new keys
        buckets.take(key, 0.1)
    assert len(buckets) == 3
    # a was the least recently used and went; the others kept their state (not all emptied at once).
    assert buckets.take("b", 0.1) > 0 and buckets.take("d", 0.1) > 0


@pytest.mark.parametrize(
    "peer, forwarded, trusted, expected",
    [
        ("10.0.0.5", "203.0.113.7", [], "10.0.0.5"),  # no trusted proxies: X-Forwarded-For is ignored
        ("198.51.100.1", "203.0.113.7", ["10.0.0.0/8"], "198.51.100.1"),  # the peer is not a trusted proxy
        ("10.0.0.5", "203.0.113.7", ["10.0.0.0/8"], "203.0.113.7"),
        (
            "10.0.0.5",
            "1.2.3.4, 203.0.113.7, 10.0.0.9",
            ["10.0.0.0/8"],
            "203.0.113.7",
        ),  # a client-written 1.2.3.4 is not believed
        ("10.0.0.5", "junk", ["10.0.0.0/8"], "10.0.0.5"),
        ("10.0.0.5", None, ["10.0.0.0/8"], "10.0.0.5"),
    ],
)
def test_client_address_believes_forwarded_for_only_from_trusted_proxies(peer, forwarded, trusted, expected):
    headers = [(b"x-forwarded-for", forwarded.encode())] if forwarded else []
    scope = {"client": (peer, 1234), "headers": headers}
    assert client_address(scope, trusted_networks(trusted)) == expected


def test_trusted_proxies_are_read_from_the_environment():
    assert load_settings({"CAPREG_TRUSTED_PROXIES": "10.0.0.0/8, 192.168.1.1"}).trusted_proxies == [
        "10.0.0.0/8",
        "192.168.1.1",
    ]
    assert load_settings({}).trusted_proxies == []
    with pytest.raises(SystemExit):
        load_settings({"CAPREG_TRUSTED_PROXIES": "not-an-ip"})


async def test_the_spelling_of_authorization_never_yields_a_new_bucket(database_url, mint, tenant):
    settings = Settings(
        database_url=database_url, home=Path(tempfile.mkdtemp(prefix="capreg-home-")), rate_limit=0.1, rate_burst=3
    )
    async with running_app(settings) as (_, client):
        token = mint(tenant, "router", "registry:read")["Authorization"].split(" ", 1)[1]
        spellings = [f"Bearer {token}", f"bearer {token}", f"BEARER   {token}", f"Bearer\t{token}", f" Bearer {token} "]
        statuses = [(await client.get("/v1/capabilities", headers={"Authorization": s})).status_code for s in spellings]
        assert statuses.count(200) == 3 and statuses[3:] == [429, 429], statuses
        # A second token of the same identity shares the bucket too (the key is issuer, tenant, sub).
        again = mint(tenant, "router", "registry:read")
        assert (await client.get("/v1/capabilities", headers=again)).status_code == 429


async def test_junk_tokens_share_their_senders_address_bucket(database_url, mint, tenant):
    settings = Settings(
        database_url=database_url, home=Path(tempfile.mkdtemp(prefix="capreg-home-")), rate_limit=0.1, rate_burst=3
    )
    async with running_app(settings) as (_, client):
        statuses = [
            (await client.get("/v1/capabilities", headers={"Authorization": f"Bearer junk{i}"})).status_code
            for i in range(6)
        ]
        assert statuses[:3] == [401, 401, 401] and statuses[3:] == [429, 429, 429]
        # A verified caller from the same address has its own bucket.
        assert (
            await client.get("/v1/capabilities", headers=mint(tenant, "router", "registry:read"))
        ).status_code == 200


@given(st.lists(st.tuples(st.integers(0, 20), st.floats(0, 5)), max_size=200), st.sampled_from([4, 1000]))
def test_buckets_stay_bounded_and_a_remembered_key_never_passes_its_rate(requests, bound):
    buckets = TokenBuckets(rate=2.0, burst=3, max_buckets=bound)
    passed: dict[int, int] = {}
    now = 0.0
    for key, step in requests:
        now += step
        if buckets.take(key, now) == 0.0:
            passed[key] = passed.get(key, 0) + 1
        assert len(buckets) <= bound
    if bound == 1000:  # nothing evicted: each key got at most its burst plus the rate over the time
        for count in passed.values():
            assert count <= 3 + 2.0 * now + 1e-9


def test_an_ipv6_client_is_one_bucket_per_64():
    from registry.web.rate_limit import address_bucket

    assert address_bucket("2001:db8:1:2:aaaa::1") == address_bucket("2001:db8:1:2:ffff::9") == "2001:db8:1:2::/64"
    assert address_bucket("2001:db8:1:3::1") != address_bucket("2001:db8:1:2::1")
    assert address_bucket("192.0.2.7") == "192.0.2.7"
    assert address_bucket("::ffff:192.0.2.7") == "::ffff:192.0.2.7"
    assert address_bucket("unknown") == "unknown"
