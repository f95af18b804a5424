"""The client's pure parts: refs, Retry-After, the retry policy, the ETag cache, card bodies."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from registry.client import CapregError, parse_ref
from registry.client.calls import EtagCache, RetryPolicy, card_body, retry_after_seconds
from registry.client.errors import error_from_answer


def test_refs():
    ref = parse_ref("acme/billing-agent/invoice.lookup@>=2,<3")
    assert (ref.audience, ref.skill, ref.version) == ("acme/billing-agent", "invoice.lookup", ">=2,<3")
    assert ref.path.endswith("/skills/invoice.lookup/versions/%3E%3D2%2C%3C3")
    assert parse_ref("acme/a/s").version == "latest"
    for bad in ["acme/a", "acme/a/s@", "a//s", "acme/a/s/x"]:
        with pytest.raises(CapregError) as error:
            parse_ref(bad)
        assert error.value.code == "invalid_ref"


def test_retry_after_in_seconds_or_as_a_date():
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    assert retry_after_seconds("7") == 7.0
    assert retry_after_seconds(format_datetime(now + timedelta(seconds=20), usegmt=True), now=now.timestamp()) == 20.0
    assert retry_after_seconds(format_datetime(now - timedelta(seconds=20), usegmt=True), now=now.timestamp()) == 0.0
    assert retry_after_seconds("soon") is None and retry_after_seconds(None) is None


@given(st.integers(0, 10), st.one_of(st.none(), st.floats(0, 1e6)), st.integers(0, 5), st.floats(0.01, 60))
def test_retry_delays_are_bounded(attempt, retry_after, retries, max_wait):
    delay = RetryPolicy(retries=retries, backoff=0.5, max_wait=max_wait).delay(attempt, retry_after)
    if attempt >= retries:
        assert delay is None
    else:
        assert 0 <= delay <= max_wait
        if retry_after is not None:
            assert delay == min(retry_after, max_wait)


def test_etag_cache_evicts_the_least_recently_used():
    cache = EtagCache(size=2)
    cache.store(("a",), '"1"', b"a")
    cache.store(("b",), '"2"', b"b")
    assert cache.lookup(("a",)) == ('"1"', b"a")
    cache.store(("c",), '"3"', b"c")
    assert cache.lookup(("b",)) is None and cache.lookup(("a",)) is not None


def test_problem_bodies_and_other_bodies():
    error = error_from_answer(
        403,
        json.dumps(
            {
                "type": "x",
                "title": "Forbidden",
                "status": 403,
                "detail": "no",
                "code": "delegation_denied",
                "reason": "depth_exhausted",
                "traceId": "abc",
            }
        ).encode(),
    )
    assert (error.status, error.code, error.reason, error.trace_id) == (
        403,
        "delegation_denied",
        "depth_exhausted",
        "abc",
    )
    assert str(error) == "403 delegation_denied: no (depth_exhausted)"
    gateway = error_from_answer(502, b"<html>Bad Gateway</html>")
    assert (gateway.code, gateway.message) == ("http_502", "<html>Bad Gateway</html>")


def test_card_bodies_from_an_a2a_card_plus_registry_fields():
    from a2a.types import AgentCard, AgentSkill

    card = AgentCard(
        name="A", description="d", version="1.0.0", skills=[AgentSkill(id="s.x", name="S", description="d")]
    )
    body = json.loads(card_body(card, {"visibility": "public"}, {"s.x": {"version": "1.0.0", "sideEffect": "none"}}))
    assert body["visibility"] == "public" and body["skills"][0] == {
        "id": "s.x",
        "name": "S",
        "description": "d",
        "version": "1.0.0",
        "sideEffect": "none",
    }
    with pytest.raises(CapregError) as unknown:
        card_body(card, None, {"s.y": {}})
    assert unknown.value.code == "invalid_card"
    with pytest.raises(CapregError) as not_json:
        card_body(b"not json", {"visibility": "public"})
    assert not_json.value.code == "invalid_card"


def test_a_malformed_ticket_header_is_invalid_ticket_never_another_error():
    """PyJWT raises InvalidTokenError (not DecodeError) for a non-string kid or a `crit` header; an
    agent's TicketAuthBackend must still answer 401, never 500."""
    import base64

    from registry.client import TicketVerifier

    def b64(value: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    verifier = TicketVerifier("http://127.0.0.1:9", audience="acme/billing-agent")
    for header in (
        {"alg": "EdDSA", "typ": "capreg-ticket+jwt", "kid": 123},
        {"alg": "EdDSA", "typ": "capreg-ticket+jwt", "kid": "k", "crit": ["x"]},
    ):
        with pytest.raises(CapregError) as error:
            verifier.verify(f"{b64(header)}.e30.AAAA")
        assert (error.value.code, error.value.reason) == ("invalid_ticket", "malformed")


def test_cached_keys_are_read_again_after_max_key_age_so_a_removed_key_stops_verifying():
    import time as clock

    import httpx

    from registry.client import TicketVerifier

    key_sets = [
        {"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "old", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]},
        {"keys": []},
    ]
    fetches = []

    def jwks(request: httpx.Request) -> httpx.Response:
        fetches.append(request.url.path)
        return httpx.Response(200, json=key_sets[min(len(fetches) - 1, 1)])

    verifier = TicketVerifier(
        "http://registry.test",
        audience="acme/a",
        max_key_age=0.05,
        http=httpx.Client(transport=httpx.MockTransport(jwks)),
    )
    assert verifier._key("old") is not None and len(fetches) == 1
    assert verifier._key("old") is not None and len(fetches) == 1  # fresh: no fetch
    clock.sleep(0.06)
    with pytest.raises(CapregError) as error:
        verifier._key("old")  # the registry no longer publishes it
    assert error.value.reason == "unknown_key" and len(fetches) == 2
