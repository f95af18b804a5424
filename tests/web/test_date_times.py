"""Every date-time a caller can give, on every endpoint, is range-checked after conversion to UTC and
after any arithmetic on it: never a 5xx, and a 400 names the parameter (registry.core.date_times).

The parameters are enumerated from openapi/openapi.json (every `format: date-time` in a parameter
or a request body), so a new one without a request below fails `test_every_date_time_is_covered`."""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from registry.core.date_times import parse_date_time, shifted
from registry.core.problems import ProblemError
from tests.conftest import ROOT, example


def _date_time_locations() -> list[tuple[str, str, str, tuple]]:
    """(METHOD, path, 'query' | 'body', name or body path) for every date-time in the document."""
    document = json.loads((ROOT / "openapi" / "openapi.json").read_text())
    components = document["components"]["schemas"]
    found: list[tuple[str, str, str, tuple]] = []

    def walk(schema, at: tuple, into: list, seen: tuple = ()) -> None:
        if not isinstance(schema, dict):
            return
        if "$ref" in schema:
            name = schema["$ref"].rsplit("/", 1)[-1]
            if name not in seen:
                walk(components[name], at, into, (*seen, name))
            return
        if schema.get("format") == "date-time":
            into.append(at)
        for key in ("oneOf", "anyOf", "allOf"):
            for sub in schema.get(key, []):
                walk(sub, at, into, seen)
        for key, sub in schema.get("properties", {}).items():
            walk(sub, (*at, key), into, seen)
        if "items" in schema:
            walk(schema["items"], (*at, 0), into, seen)

    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            for parameter in operation.get("parameters", []):
                hits: list = []
                walk(parameter.get("schema"), (), hits)
                if hits:
                    found.append((method.upper(), path, parameter["in"], (parameter["name"],)))
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            hits = []
            walk(body, (), hits)
            found += [(method.upper(), path, "body", hit) for hit in hits]
    return found


LOCATIONS = _date_time_locations()
_VERSION = "/v1/agents/{tenant}/{agent_id}/skills/{skill_id}/versions/{version}"
SKILL = example("billing-agent.json")["skills"][0]


def _with(body, at: tuple, value):
    """`body` with `value` at the path `at` (lists by index)."""
    node = body
    for key in at[:-1]:
        node = node[key]
    node[at[-1]] = value
    return body


async def _send(client, mint, tenant: str, method: str, path: str, where: str, at: tuple, value: str):
    """A request that is valid except, perhaps, for the date-time `value` at (where, at)."""
    if path in ("/v1/audit/events", "/v1/audit/events/hourly"):
        return await client.get(path, params={at[0]: value}, headers=mint(tenant, "auditor", "audit:read"))
    if path == "/v1/agents/{tenant}/{agent_id}":
        card = _with(example("billing-agent.json"), at, value)
        agent = "a" + secrets.token_hex(6)
        return await client.put(
            f"/v1/agents/{tenant}/{agent}", json=card, headers=mint(tenant, "publisher", "registry:publish")
        )
    if path == "/v1/compatibility":
        body = _with(
            {"old": json.loads(json.dumps(SKILL)), "new": {**json.loads(json.dumps(SKILL)), "version": "2.1.0"}},
            at,
            value,
        )
        return await client.post(path, json=body, headers=mint(tenant, "checker", "registry:read"))
    if path == f"{_VERSION}/deprecate":
        target = f"/v1/agents/{tenant}/billing-agent/skills/{SKILL['id']}/versions/{SKILL['version']}/deprecate"
        return await client.post(target, json=_with({}, at, value), headers=mint(tenant, "admin", "registry:admin"))
    raise AssertionError(f"no request for the date-time {where} {at} of {method} {path}: add one here")


def test_every_date_time_is_covered():
    """The document has the date-times this file knows how to send (a new one must be added to _send)."""
    assert {(m, p) for m, p, _, _ in LOCATIONS} == {
        ("GET", "/v1/audit/events"),
        ("GET", "/v1/audit/events/hourly"),
        ("PUT", "/v1/agents/{tenant}/{agent_id}"),
        ("POST", "/v1/compatibility"),
        ("POST", f"{_VERSION}/deprecate"),
    }
    assert len(LOCATIONS) == 8


offsets = st.one_of(
    st.just("Z"),
    st.builds(
        lambda sign, h, m: f"{sign}{h:02d}:{m:02d}", st.sampled_from("+-"), st.integers(0, 23), st.integers(0, 59)
    ),
)
# Near both ends of the range, and anywhere in it.
years = st.one_of(st.sampled_from([1, 2, 9998, 9999]), st.integers(1, 9999))
date_times = st.builds(
    lambda y, mo, d, h, mi, s, frac, off: f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}{frac}{off}",
    years,
    st.integers(1, 12),
    st.integers(1, 28),
    st.integers(0, 23),
    st.integers(0, 59),
    st.integers(0, 59),
    st.sampled_from(["", ".5", ".999999"]),
    offsets,
)
EDGES = [
    "9999-12-31T23:30:00Z",
    "0001-01-01T00:00:00+23:59",
    "9999-12-31T23:59:59-23:59",
    "0001-01-01T00:30:00Z",
    "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59.999999Z",
]


@pytest.fixture
async def deprecable(client, mint, tenant):
    response = await client.put(
        f"/v1/agents/{tenant}/billing-agent",
        json=example("billing-agent.json"),
        headers=mint(tenant, "publisher", "registry:publish"),
    )
    assert response.status_code == 201, response.text
    return tenant


def _names(response, where: str, at: tuple) -> bool:
    """Whether a 400 names the parameter: the query name, or the body field's JSON pointer."""
    paths = [item["path"] for item in response.json().get("errors") or []]
    wanted = at[0] if where == "query" else "/" + "/".join(str(part) for part in at)
    return wanted in paths


@pytest.mark.parametrize("location", LOCATIONS, ids=[f"{m} {p} {'.'.join(map(str, a))}" for m, p, _, a in LOCATIONS])
async def test_edges_of_the_range(location, client, mint, deprecable):
    method, path, where, at = location
    for value in EDGES:
        response = await _send(client, mint, deprecable, method, path, where, at, value)
        assert response.status_code < 500, (value, response.text)
        if response.status_code == 400:
            assert _names(response, where, at), (value, response.text)


@pytest.mark.parametrize("location", LOCATIONS, ids=[f"{m} {p} {'.'.join(map(str, a))}" for m, p, _, a in LOCATIONS])
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(value=date_times)
async def test_any_date_time_is_answered(location, value, client, mint, deprecable):
    method, path, where, at = location
    response = await _send(client, mint, deprecable, method, path, where, at, value)
    assert response.status_code < 500, (value, response.text)
    if response.status_code == 400:
        assert _names(response, where, at), (value, response.text)


@given(date_times, st.integers(-(10**6), 10**6))
def test_parse_and_shift_never_overflow(text, hours):
    """The pure functions: a valid-looking date-time is either an aware UTC datetime or a 400 naming it."""
    try:
        at = parse_date_time("since", text)
        assert at is not None and at.utcoffset() == timedelta(0)
        moved = shifted("since", at, timedelta(hours=hours))
        assert moved.tzinfo is not None
    except ProblemError as error:
        assert error.status == 400 and [item.path for item in error.errors] == ["since"]


def test_the_reported_cases():
    with pytest.raises(ProblemError):
        parse_date_time("since", "0001-01-01T00:00:00+23:59")
    end = parse_date_time("until", "9999-12-31T23:30:00Z")
    assert end == datetime(9999, 12, 31, 23, 30, tzinfo=UTC)
    with pytest.raises(ProblemError):
        shifted("until", end, timedelta(hours=1))
