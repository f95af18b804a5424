"""/metrics beyond request counts: batch sizes, pool waits, cache hits and bytes, and the database
gauges (audit queue, live leases, search index freshness), each present after some traffic and
moving with it (docs/operations.md#metrics)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from registry.web.observability import DATABASE_GAUGES_MAX_AGE
from tests.conftest import example


async def scrape(client) -> dict[str, float]:
    """Every sample of one scrape by its name and labels (`name{a="b"}`), or its name alone."""
    response = await client.get("/metrics")
    assert response.status_code == 200
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples


SERIES = [
    "capreg_requests_total",
    "capreg_request_duration_seconds_bucket",
    "capreg_group_commit_batch_size_count",
    "capreg_lease_batch_size_count",
    "capreg_db_pool_wait_seconds_count",
    "capreg_read_pool_wait_seconds_count",
    "capreg_response_cache_hits_total",
    "capreg_response_cache_misses_total",
    "capreg_response_cache_bytes",
    "capreg_release_cache_hits_total",
    "capreg_release_cache_bytes",
    "capreg_audit_queue_events",
    "capreg_audit_queue_oldest_seconds",
    "capreg_live_leases",
    "capreg_change_head_seq",
    "capreg_search_index_seq",
    "capreg_search_index_lag",
]


async def test_every_series_is_served_after_traffic_and_moves_with_it(client, mint, tenant, registry, clock):
    publish = mint(tenant, "publisher", "registry:publish")
    before = await scrape(client)
    response = await client.put(
        f"/v1/agents/{tenant}/billing-agent", json=example("billing-agent.json"), headers=publish
    )
    assert response.status_code == 201, response.text
    heartbeat = await client.post(
        f"/v1/agents/{tenant}/billing-agent/heartbeat", json={"instanceId": "i-1", "ttlSeconds": 60}, headers=publish
    )
    assert heartbeat.status_code == 200, heartbeat.text
    discovery = {"tenant": tenant}
    assert (await client.get("/v1/capabilities", params=discovery)).status_code == 200
    middle = await scrape(client)
    assert (await client.get("/v1/capabilities", params=discovery)).status_code == 200  # the same page again
    clock.advance(DATABASE_GAUGES_MAX_AGE)  # the database gauges are read again
    after = await scrape(client)

    present = {name.partition("{")[0] for name in after}
    assert [series for series in SERIES if series not in present] == []
    # the route template, not the raw path: one series for every tenant's agent
    assert any(key.startswith('capreg_requests_total{method="PUT",path="/v1/agents/{') for key in after)
    assert not any(tenant in key for key in after)
    assert after["capreg_response_cache_hits_total"] > middle["capreg_response_cache_hits_total"]
    assert after["capreg_group_commit_batch_size_count"] > before["capreg_group_commit_batch_size_count"]
    assert after["capreg_lease_batch_size_count"] > before["capreg_lease_batch_size_count"]
    assert after["capreg_db_pool_wait_seconds_count"] > before["capreg_db_pool_wait_seconds_count"]
    assert after["capreg_live_leases"] >= 1
    assert after["capreg_change_head_seq"] >= registry.search.seq
    assert after["capreg_search_index_lag"] == max(
        0, after["capreg_change_head_seq"] - after["capreg_search_index_seq"]
    )


async def test_database_gauges_are_read_once_per_max_age_not_per_scrape(client, app, clock):
    database = app.state.metrics.database
    await scrape(client)  # the stepped clock's first reading: read afresh
    reads = database.reads
    await scrape(client)
    clock.advance(DATABASE_GAUGES_MAX_AGE / 2)
    await scrape(client)
    assert database.reads == reads
    clock.advance(DATABASE_GAUGES_MAX_AGE)
    await scrape(client)
    assert database.reads == reads + 1
