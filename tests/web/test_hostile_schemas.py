"""Registrant schemas, patterns and lenient repair as an attacker would send them, against a real
`capreg serve` (docs/security.md): no keyword makes the server fetch anything, registrant patterns
never backtrack, repair is bounded, and the slowest request one can build neither freezes the
server nor runs unbounded. Then hypothesis-generated hostile schemas and arguments for the pure
functions (compilation, compatibility, validation), each example within a time bound."""

from __future__ import annotations

import asyncio
import http.server
import json
import secrets
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from registry.core.bounded_work import WALL_SECONDS
from registry.core.schema_guard import SchemaRejected, compile_schema, schema_problems
from registry.release.arguments import MAX_REPAIR_NODES, validate_arguments
from registry.versions.compatibility.verdict import check_compatibility
from tests.conftest import capreg

# --- A listener that records every request the registry might make ---------------------------


class _Recorder(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        type(self).hits.append(self.path)
        body = b'{"type": "object"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/schema+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def listener() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on 127.0.0.1 that answers every GET with a schema and records its path."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", _Recorder.hits
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def live(live_server):
    """(base URL, tenant, publisher headers, reader headers) on the real server."""
    base, env, _ = live_server
    tenant = "h" + secrets.token_hex(5)

    def token(scopes: str) -> dict:
        minted = capreg(env, "token", "mint", "--tenant", tenant, "--sub", "attacker", "--scope", scopes).stdout.strip()
        return {"Authorization": f"Bearer {minted}"}

    return base, tenant, token("registry:publish registry:read"), token("registry:read")


def _skill(input_schema: dict, *, version: str = "1.0.0", skill_id: str = "hostile.skill") -> dict:
    return {
        "id": skill_id,
        "name": "Hostile",
        "description": "A skill whose schema is hostile.",
        "version": version,
        "sideEffect": "none",
        "scopes": [],
        "inputSchema": input_schema,
        "outputSchema": {"type": "object"},
    }


def _agent(input_schema: dict) -> dict:
    return {
        "name": "Hostile agent",
        "description": "Registers hostile schemas.",
        "version": "1.0.0",
        "visibility": "public",
        "skills": [_skill(input_schema)],
    }


def _register(live, agent_id: str, input_schema: dict) -> httpx.Response:
    base, tenant, publisher, _ = live
    return httpx.put(f"{base}/v1/agents/{tenant}/{agent_id}", json=_agent(input_schema), headers=publisher, timeout=30)


def _compare(live, old_schema: dict, new_schema: dict) -> httpx.Response:
    base, _, _, reader = live
    body = {"old": _skill(old_schema), "new": _skill(new_schema, version="1.1.0")}
    return httpx.post(f"{base}/v1/compatibility", json=body, headers=reader, timeout=30)


def _validate(live, agent_id: str, arguments, mode: str = "lenient", timeout: float = 30) -> httpx.Response:
    base, tenant, _, reader = live
    path = f"{base}/v1/agents/{tenant}/{agent_id}/skills/hostile.skill/versions/1.0.0/validate"
    return httpx.post(path, json={"arguments": arguments, "mode": mode}, headers=reader, timeout=timeout)


# --- 1. Schemas never cause I/O ----------------------------------------------------------------


def _fetching_schemas(url: str) -> list[tuple[dict, str]]:
    """(schema, JSON pointer of the keyword that must be refused), one for each way a schema can
    name something to fetch."""
    return [
        (
            {"type": "object", "properties": {"a": {"$schema": f"{url}/internal-admin/delete?all=1"}}},
            "/properties/a/$schema",
        ),
        ({"type": "object", "$defs": {"x": {"$schema": f"{url}/defs"}}}, "/$defs/x/$schema"),
        ({"type": "object", "$defs": {"x": {"items": [{"$schema": f"{url}/deep"}]}}}, "/$defs/x/items/0/$schema"),
        ({"type": "object", "$schema": f"{url}/top"}, "/$schema"),
        ({"type": "object", "$schema": "http://json-schema.org/draft-07/schema#"}, "/$schema"),
        ({"type": "object", "properties": {"a": {"$ref": f"{url}/ref"}}}, "/properties/a/$ref"),
        ({"type": "object", "properties": {"a": {"$dynamicRef": f"{url}/dyn"}}}, "/properties/a/$dynamicRef"),
        ({"type": "object", "allOf": [{"$recursiveRef": f"{url}/rec"}]}, "/allOf/0/$recursiveRef"),
        ({"type": "object", "$id": f"{url}/base/", "properties": {"a": {"$ref": "#/$defs/x"}}}, "/$id"),
        ({"type": "object", "properties": {"a": {"$id": "urn:example:a"}}}, "/properties/a/$id"),
        ({"type": "object", "properties": {"a": {"$id": "//127.0.0.1/x"}}}, "/properties/a/$id"),
        ({"type": "object", "properties": {"a": {"$ref": "other.json"}}}, "/properties/a/$ref"),
        (
            {"type": "object", "properties": {"a": {"contentSchema": {"$ref": f"{url}/content"}}}},
            "/properties/a/contentSchema/$ref",
        ),
        ({"type": "object", "x-vendor": {"nested": {"$schema": f"{url}/unknown-keyword"}}}, "/x-vendor/nested/$schema"),
        # A property named like a data keyword is still a schema position.
        ({"type": "object", "properties": {"default": {"$ref": f"{url}/named-default"}}}, "/properties/default/$ref"),
        ({"type": "object", "properties": {"a": {"$ref": "file:///etc/passwd"}}}, "/properties/a/$ref"),
        ({"type": "object", "properties": {"a": {"$schema": "file:///etc/passwd"}}}, "/properties/a/$schema"),
    ]


def test_no_schema_keyword_makes_the_server_fetch_anything(live, listener):
    url, hits = listener
    base, tenant, _, reader = live
    for index, (schema, pointer) in enumerate(_fetching_schemas(url)):
        registered = _register(live, f"fetch-{index}", schema)
        assert registered.status_code == 400, (schema, registered.text)
        problem = registered.json()
        assert problem["code"] == "invalid_request"
        assert f"/skills/0/inputSchema{pointer}" in [e["path"] for e in problem["errors"]], (schema, problem)
        # A refused registration changes nothing.
        assert httpx.get(f"{base}/v1/agents/{tenant}/fetch-{index}", headers=reader).status_code == 404

        compared = _compare(live, {"type": "object"}, schema)
        assert compared.status_code == 400, (schema, compared.text)
        assert f"/new/inputSchema{pointer}" in [e["path"] for e in compared.json()["errors"]], compared.json()
    assert hits == []


def test_data_that_looks_like_a_keyword_is_data(live, listener):
    url, hits = listener
    schema = {
        "type": "object",
        "properties": {
            "$schema": {"type": "string", "default": "x"},
            "doc": {"type": "object", "default": {"$ref": f"{url}/data"}},
        },
        "examples": [{"$schema": f"{url}/example"}],
    }
    assert _register(live, "data-keywords", schema).status_code == 201
    assert hits == []


def test_a_nested_schema_in_defs_is_refused_with_its_pointer(live):
    schema = {"type": "object", "$defs": {"inner": {"$defs": {"x~y/z": {"$schema": "https://evil.example/s"}}}}}
    response = _register(live, "nested-defs", schema)
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert errors[0]["path"] == "/skills/0/inputSchema/$defs/inner/$defs/x~0y~1z/$schema"
    assert "2020-12" in errors[0]["message"]


# --- 2. Registrant patterns run in a linear-time engine ----------------------------------------


def test_a_catastrophic_pattern_property_answers_fast(live):
    schema = {"type": "object", "patternProperties": {"^(a+)+$": {"type": "integer"}}, "additionalProperties": False}
    assert _register(live, "redos", schema).status_code == 201
    name = "a" * 28 + "!"  # 29 characters: 9 s in Python's re, each more character doubling it

    def took(key: str) -> float:
        started = time.monotonic()
        response = _validate(live, "redos", {key: 1, "aaaa": 2})
        assert response.status_code == 200, response.text
        return time.monotonic() - started

    # A ratio within one run, not a threshold: a backtracking engine takes 2**25 times longer on the
    # 29-character name than on a 4-character one; a linear one about the same (request overhead).
    short = min(took("aa!") for _ in range(3))
    long = min(took(name) for _ in range(3))
    assert long < 50 * short, (long, short)
    report = _validate(live, "redos", {name: 1, "aaaa": 2}).json()
    assert report["valid"] is True and report["arguments"] == {"aaaa": 2}
    assert [w["path"] for w in report["warnings"]] == [f"/{name}"]


def test_patterns_that_need_backtracking_are_refused(live):
    for pattern in (r"^(a+)+\1$", r"^(?=a)a$", r"^(?<!b)a$"):
        response = _register(
            live, "backtracking", {"type": "object", "properties": {"a": {"type": "string", "pattern": pattern}}}
        )
        assert response.status_code == 400, pattern
        error = response.json()["errors"][0]
        assert error["path"] == "/skills/0/inputSchema/properties/a/pattern"
        assert "linear-time" in error["message"]


# --- 3. Lenient repair is bounded --------------------------------------------------------------


def _doubling_chain(levels: int) -> dict:
    """`{}` repaired against this would become 2^levels objects: each level has two defaulted
    object properties that refer to the next level."""
    defs = {
        f"l{i}": {
            "type": "object",
            "default": {},
            "properties": {
                "left": {"$ref": f"#/$defs/l{i + 1}"},
                "right": {"$ref": f"#/$defs/l{i + 1}"},
            },
        }
        for i in range(levels)
    }
    defs[f"l{levels}"] = {"type": "object", "default": {}}
    return {"type": "object", "$defs": defs, "$ref": "#/$defs/l0"}


def test_an_exponential_repair_answers_fast_with_valid_false(live):
    assert _register(live, "doubling", _doubling_chain(19)).status_code == 201
    response = _validate(live, "doubling", {})
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["valid"] is False
    # Counted work: the repair stopped at its node budget (2**19 nodes otherwise).
    assert str(MAX_REPAIR_NODES) in report["errors"][0]["message"]
    # Strict mode repairs nothing: the same schema validates `{}` at once.
    assert _validate(live, "doubling", {}, mode="strict").json()["valid"] is True


def test_a_repair_deeper_than_the_depth_limit_is_refused():
    nested: dict = {}
    for _ in range(70):
        nested = {"n": nested}
    report = validate_arguments(
        {"type": "object", "properties": {"deep": {"type": "object", "default": nested}}}, {}, "lenient"
    )
    assert report.valid is False and "deeper than 64" in report.errors[0].message


# --- 4. The slowest request does not freeze the server -----------------------------------------


def _exponential_validation(levels: int) -> dict:
    """Validating a non-string against this takes time 2^levels in jsonschema-rs: every level is an
    anyOf of two references to the next."""
    defs = {
        f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}", "minimum": 0}]}
        for i in range(levels)
    }
    defs[f"d{levels}"] = {"type": "string"}
    return {"type": "object", "$defs": defs, "properties": {"x": {"$ref": "#/$defs/d0"}}}


async def _healthz_while(base: str, request) -> tuple[list[float], float, httpx.Response]:
    """Run `request` (a coroutine) while polling /healthz: (each /healthz's time, request's time, its response)."""
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        started = time.monotonic()
        task = asyncio.ensure_future(request(client))
        latencies: list[float] = []
        await asyncio.sleep(0.05)
        while not task.done():
            before = time.monotonic()
            assert (await client.get("/healthz")).status_code == 200
            latencies.append(time.monotonic() - before)
            await asyncio.sleep(0.02)
        response = await task
        return latencies, time.monotonic() - started, response


def _assert_healthz_fast(latencies: list[float]) -> None:
    """/healthz under 100 ms, allowing for the scheduling blips of this shared 2-core machine (an idle
    server, no work running, shows single answers up to ~135 ms at load 11): 95 % under 100 ms and
    none over 1 s. A loop held by the work would show one answer as slow as the work itself
    (2 to 6 s here, 9 s for the ReDoS of old), which this fails on."""
    assert len(latencies) >= 10, latencies
    ordered = sorted(latencies)
    assert ordered[int(len(ordered) * 0.95) - 1] < 0.1 and ordered[-1] < 1.0, ordered[-5:]


async def test_healthz_answers_fast_while_the_slowest_validation_runs(live):
    base, tenant, _, reader = live
    assert _register(live, "exponential", _exponential_validation(45)).status_code == 201
    path = f"/v1/agents/{tenant}/exponential/skills/hostile.skill/versions/1.0.0/validate"

    async def slow(client: httpx.AsyncClient) -> httpx.Response:
        return await client.post(path, json={"arguments": {"x": 5}, "mode": "strict"}, headers=reader)

    latencies, took, response = await _healthz_while(base, slow)
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["valid"] is False and "took more than" in report["errors"][0]["message"]
    assert took < WALL_SECONDS + 3.0, took
    _assert_healthz_fast(latencies)
    # The worker that was stopped has been replaced: the next validation answers normally.
    again = _validate(live, "exponential", {"x": "fine"}, mode="strict")
    assert again.json()["valid"] is True


async def test_healthz_answers_fast_while_the_slowest_registration_is_checked(live):
    """The costliest schema found for the compiler: as many large Unicode patterns as a 1 MiB body
    holds (20 ms of CPU each, 8,000 of them). It is compiled in a worker process, stopped at the deadline:
    a 400 saying so, and /healthz is not held up."""
    base, tenant, publisher, _ = live
    pattern = r"^[\p{L}\p{N}_]{1,64}$"
    schema = {
        "type": "object",
        "properties": {f"p{i}": {"type": "string", "pattern": pattern + "|" + str(i)} for i in range(8000)},
    }
    body = json.dumps(_agent(schema)).encode()
    assert len(body) < 1024 * 1024

    async def register(client: httpx.AsyncClient) -> httpx.Response:
        headers = {**publisher, "Content-Type": "application/json"}
        return await client.put(f"/v1/agents/{tenant}/big-patterns", content=body, headers=headers)

    latencies, took, response = await _healthz_while(base, register)
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "invalid_request" and "took more than" in response.json()["detail"]
    assert took < WALL_SECONDS + 2.0, took
    _assert_healthz_fast(latencies)


# --- Hypothesis: hostile schemas and arguments for the pure functions ---------------------------

_NASTY_PATTERNS = [r"^(a+)+$", r"(a|aa)*b", r"^(\w+\s?)*$", r"(x+x+)+y", r"^[a-z]*$", r"\1(a)", r"(?=a)", "["]
_URLS = [
    "http://127.0.0.1:9/x",
    "file:///etc/passwd",
    "https://json-schema.org/draft-07/schema",
    "urn:x",
    "other.json",
    "#/$defs/a",
    "#",
]

_leaf_schemas = st.one_of(
    st.booleans(),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["string", "integer", "number", "object", "array", "boolean", "null"])}
    ),
    st.fixed_dictionaries({"type": st.just("string"), "pattern": st.sampled_from(_NASTY_PATTERNS)}),
    st.fixed_dictionaries({"$ref": st.sampled_from(_URLS)}),
    st.fixed_dictionaries({"$schema": st.sampled_from(_URLS)}),
    st.fixed_dictionaries({"$id": st.sampled_from(_URLS)}),
    st.fixed_dictionaries({"enum": st.lists(st.integers(0, 5), max_size=4)}),
    st.fixed_dictionaries({"minimum": st.integers(-3, 3), "maximum": st.integers(-3, 3)}),
)


def _compound(children):
    return st.one_of(
        st.fixed_dictionaries(
            {
                "type": st.just("object"),
                "properties": st.dictionaries(st.sampled_from(["a", "b", "$ref", "default"]), children, max_size=3),
            },
            optional={
                "additionalProperties": st.booleans(),
                "patternProperties": st.dictionaries(st.sampled_from(_NASTY_PATTERNS), children, max_size=2),
                "required": st.lists(st.sampled_from(["a", "b"]), max_size=2, unique=True),
                "default": st.dictionaries(st.sampled_from(["a", "b"]), st.integers(), max_size=2),
            },
        ),
        st.fixed_dictionaries({"anyOf": st.lists(children, min_size=1, max_size=3)}),
        st.fixed_dictionaries({"allOf": st.lists(children, min_size=1, max_size=3)}),
        st.fixed_dictionaries({"items": children, "type": st.just("array")}),
        st.fixed_dictionaries({"$defs": st.fixed_dictionaries({"a": children}), "$ref": st.just("#/$defs/a")}),
    )


hostile_schemas = st.recursive(_leaf_schemas, _compound, max_leaves=12)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10) | st.text(alphabet="ab!", max_size=30),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(["a", "b", "aaaa", "a" * 28 + "!"]), children, max_size=4)
    ),
    max_leaves=15,
)

_bounded = settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


def _names_something_to_fetch(schema) -> bool:
    text = json.dumps(schema)
    return any(f'"{keyword}": "{url}"' in text for keyword in ("$ref", "$schema", "$id") for url in _URLS[:5])


@_bounded
@given(hostile_schemas)
def test_compiling_a_hostile_schema_is_refused_or_safe(schema):
    try:
        compile_schema(schema)
    except SchemaRejected as rejected:
        assert rejected.errors
        for error in rejected.errors:
            assert error.path == "" or error.path.startswith("/")
    else:
        assert schema_problems(schema) == []
        assert not _names_something_to_fetch(schema)


@_bounded
@given(hostile_schemas, hostile_schemas)
def test_comparing_hostile_schemas_terminates(old, new):
    changes = check_compatibility({"inputSchema": old, "outputSchema": new}, {"inputSchema": new, "outputSchema": old})
    assert all(change.path.startswith("/") for change in changes)


@_bounded
@given(hostile_schemas, json_values, st.sampled_from(["strict", "lenient"]))
def test_validating_hostile_arguments_terminates_with_a_report(schema, arguments, mode):
    schema = {"type": "object", "properties": {"v": schema}} if not isinstance(schema, dict) else schema
    report = validate_arguments(schema, arguments if isinstance(arguments, dict) else {"v": arguments}, mode)
    assert report.valid in (True, False)
    if report.valid:
        assert report.errors == []


def test_compilation_cannot_fetch_even_what_the_checks_miss(listener, monkeypatch):
    """Were the keyword checks to miss something, compiling still fetches nothing: the retriever
    refuses every URI, over the network and from files."""
    import registry.core.schema_guard as guard

    url, hits = listener
    monkeypatch.setattr(guard, "schema_problems", lambda schema, path="": [])
    for schema in (
        {"properties": {"a": {"$schema": f"{url}/missed-schema"}}},
        {"properties": {"a": {"$ref": f"{url}/missed-ref"}}},
        {"$id": f"{url}/base/", "properties": {"a": {"$ref": "relative.json"}}},
        {"properties": {"a": {"$ref": "file:///etc/passwd"}}},
    ):
        try:
            guard.compile_schema(schema)
        except SchemaRejected:
            pass
    assert hits == []


# --- The worker pool itself ------------------------------------------------------------------


async def test_a_stopped_or_dead_worker_is_replaced_and_fails_only_its_own_task():
    import os
    import signal

    from registry.core.bounded_work import BoundedWork, WorkTimedOut

    pool = BoundedWork(workers=1, deadline=1.0, wall=30.0)
    try:
        ok = {"type": "object"}
        assert (await pool.run(validate_arguments, ok, {"a": 1}, "strict")).valid
        # CPU time is what bounds a task (RLIMIT_CPU stops it inside Rust code too).
        with pytest.raises(WorkTimedOut, match="CPU time"):
            await pool.run(validate_arguments, _exponential_validation(45), {"x": 5}, "strict")
        assert (await pool.run(validate_arguments, ok, {"a": 2}, "strict")).arguments == {"a": 2}
        # Wall-clock time bounds a task that waits rather than computes.
        pool.wall = 0.5
        with pytest.raises(WorkTimedOut, match="took more than 0.5 s"):
            await pool.run(time.sleep, 5)
        pool.wall = 30.0
        # A worker that died while idle is replaced before the next task, which then succeeds.
        for worker in list(pool._all):
            os.kill(worker.process.pid, signal.SIGKILL)
            worker.process.wait(5)
        assert (await pool.run(validate_arguments, ok, {"a": 3}, "strict")).arguments == {"a": 3}
    finally:
        pool.close()
