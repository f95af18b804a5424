"""Test fixtures: a real PostgreSQL (DATABASE_URL's server, or an embedded one), a fresh database per
run, the app on it, and callers with tokens minted by the app's own keys.

Tests isolate themselves by tenant (every test gets fresh tenant names), not by truncation: the
audit log cannot be truncated, by design.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx
import pytest
import pytest_asyncio

from auth.tokens import mint_caller_token
from registry.app import create_app
from registry.config import Settings
from registry.web.in_process import served_in_process

EXAMPLES = Path(__file__).parent / "examples"
ROOT = Path(__file__).parent.parent


def example(name: str) -> dict:
    return json.loads((EXAMPLES / name).read_text())


def _with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + database))


def database_on(server_url: str, name: str) -> str:
    """The URL of database `name` on the server of `server_url`."""
    if "host=/" in server_url or "?host=" in server_url:  # embedded: unix socket in the query string
        base, _, query = server_url.partition("?")
        return _with_database(base, name) + "?" + query
    return _with_database(server_url, name)


@pytest.fixture(scope="session")
def server_url() -> str:
    """A PostgreSQL server URL: DATABASE_URL's, or an embedded server started for this run."""
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    from db.embedded import start_embedded

    home = Path(tempfile.mkdtemp(prefix="capreg-test-"))
    server = start_embedded(home)
    pytest.embedded_server = server  # keep the handle alive for the session
    return server.get_uri()


@contextlib.asynccontextmanager
async def scratch_database(server_url: str, prefix: str) -> AsyncIterator[str]:
    """A database of its own on the test server, created empty and dropped afterwards (even while
    connected): its URL. The one way tests make one."""
    name = f"capreg_{prefix}_" + secrets.token_hex(4)
    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    try:
        yield database_on(server_url, name)
    finally:
        admin = await asyncpg.connect(server_url)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def database_url(server_url: str) -> AsyncIterator[str]:
    """A fresh database on the server for this test run, dropped afterwards."""
    async with scratch_database(server_url, "test") as url:
        yield url


@pytest.fixture(scope="session")
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, home=Path(tempfile.mkdtemp(prefix="capreg-home-")))


@contextlib.asynccontextmanager
async def running_app(settings: Settings):
    """The app with its lifespan running on the test loop, and an httpx client speaking ASGI to it
    (registry.web.in_process): tests share the app's loop and pool."""
    application = create_app(settings)
    async with served_in_process(application) as client:
        application.state.test_client = client
        yield application, client


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def app(settings: Settings):
    async with running_app(settings) as (application, _):
        yield application


@pytest_asyncio.fixture(loop_scope="session")
async def client(app) -> httpx.AsyncClient:
    return app.state.test_client


@pytest.fixture
def registry(app):
    return app.state.registry


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def db(database_url, app):
    """A pool on the test's own event loop (the app's pool lives on the test client's loop), reading
    the audit log as every reader of it does (AuditReader)."""
    from db.pool import create_pool

    pool = await create_pool(database_url, min_size=1, max_size=4)
    yield AuditReader(pool)
    await pool.close()


class AuditReader:
    """A pool or connection whose statements on the audit log's tables first chain what is stored
    (db.audit.chain_stored), as the registry's own readers do: a test reading the log after an answer
    sees what an auditor would (docs/audit.md#stored-then-chained). Everything else passes through."""

    _TABLES = ("audit_events", "audit_chain_heads", "audit_checkpoints")

    def __init__(self, target) -> None:
        self._target = target

    def __getattr__(self, name: str):
        return getattr(self._target, name)

    async def _first(self, sql: str) -> None:
        from db.audit import chain_stored

        # Inside a transaction it is the code under test writing (a batch, a sequencer step): as is.
        in_transaction = getattr(self._target, "is_in_transaction", None)
        if in_transaction is not None and in_transaction():
            return
        if any(table in sql for table in self._TABLES):
            await chain_stored(self._target)

    async def fetch(self, sql: str, *args, **options):
        await self._first(sql)
        return await self._target.fetch(sql, *args, **options)

    async def fetchrow(self, sql: str, *args, **options):
        await self._first(sql)
        return await self._target.fetchrow(sql, *args, **options)

    async def fetchval(self, sql: str, *args, **options):
        await self._first(sql)
        return await self._target.fetchval(sql, *args, **options)

    async def execute(self, sql: str, *args, **options):
        await self._first(sql)
        return await self._target.execute(sql, *args, **options)

    def acquire(self, **options):
        return _ReaderAcquire(self._target.acquire(**options))

    async def release(self, conn, **options):
        await self._target.release(getattr(conn, "_target", conn), **options)


class _ReaderAcquire:
    def __init__(self, acquiring) -> None:
        self._acquiring = acquiring

    def __await__(self):
        return self._wrapped().__await__()

    async def _wrapped(self):
        return AuditReader(await self._acquiring)

    async def __aenter__(self):
        return AuditReader(await self._acquiring.__aenter__())

    async def __aexit__(self, *exc):
        return await self._acquiring.__aexit__(*exc)


@pytest.fixture
def mint(app, settings):
    """mint(tenant, sub, scopes, regions=None, ttl=3600) -> Authorization headers."""

    def _mint(tenant: str, sub: str = "tester", scopes: str | list[str] = "", regions=None, ttl: int = 3600) -> dict:
        scope_list = scopes.split() if isinstance(scopes, str) else list(scopes)
        token = mint_caller_token(
            app.state.registry.keyring,
            issuer=settings.issuer,
            audience=settings.audience,
            tenant=tenant,
            sub=sub,
            scopes=scope_list,
            regions=regions,
            ttl=ttl,
        )
        return {"Authorization": f"Bearer {token}"}

    return _mint


@pytest.fixture
async def world(client, mint, tenant, other_tenant) -> str:
    """Tenant T: a public billing agent, a private ledger agent shared with `other_tenant`, a public
    docs agent (the three example registrations)."""
    publish = mint(tenant, "publisher", "registry:publish")
    bodies = {
        "billing-agent": example("billing-agent.json"),
        "ledger-agent": {**example("ledger-agent.json"), "sharedWith": [other_tenant]},
        "docs-search": example("legacy-0.3-search-agent.json"),
    }
    for agent_id, body in bodies.items():
        response = await client.put(f"/v1/agents/{tenant}/{agent_id}", json=body, headers=publish)
        assert response.status_code == 201, response.text
    return tenant


@pytest.fixture
def clock(registry):
    """The app's one clock (registry.core.clock) as a SteppedClock from now: a test moves time with
    `clock.advance(seconds)` instead of sleeping; the system clock is back afterwards."""
    from registry.core.clock import SteppedClock

    system, registry.clock = registry.clock, SteppedClock()
    yield registry.clock
    registry.clock = system


@pytest.fixture
def tenant() -> str:
    return "t" + secrets.token_hex(5)


@pytest.fixture
def other_tenant() -> str:
    return "o" + secrets.token_hex(5)


async def count_rows(pool, table: str, **where) -> int:
    clauses = " AND ".join(f"{column} = ${i}" for i, column in enumerate(where, 1)) or "TRUE"
    return await pool.fetchval(f"SELECT count(*) FROM {table} WHERE {clauses}", *where.values())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def capreg(env: dict, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run the capreg CLI as a user would (a separate process)."""
    result = subprocess.run(
        [sys.executable, "-m", "registry.cli", *args], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    if check and result.returncode != 0:
        raise AssertionError(f"capreg {' '.join(args)} failed: {result.stdout}\n{result.stderr}")
    return result


def start_server(
    home: Path,
    database_url: str | None,
    port: int | None = None,
    *,
    settings: dict[str, str] | None = None,
    log_name: str = "serve.log",
):
    """`capreg serve` as a process, the one way the tests start one; returns (process, base_url, env)
    once /readyz answers 200. `settings`: CAPREG_* variables for this server (CAPREG_WORKERS among
    them); its output goes to `home / log_name`, shown when it fails to start."""
    port = port or free_port()
    env = {**os.environ, "CAPREG_HOME": str(home), "CAPREG_PORT": str(port), **(settings or {})}
    # One worker unless a test sets CAPREG_WORKERS: what these tests check of one process (its caches,
    # its memory) does not depend on the machine's cores; CI's wheel install serves with the default.
    env.setdefault("CAPREG_WORKERS", "1")
    env.pop("DATABASE_URL", None)
    if database_url:
        env["DATABASE_URL"] = database_url
    log_path = home / log_name
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "registry.cli", "serve"], env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                return process, base, env
        except httpx.HTTPError:
            pass
        if process.poll() is not None:
            raise AssertionError(f"capreg serve exited: {log_path.read_text()}")
        time.sleep(0.2)
    process.kill()
    raise AssertionError(f"capreg serve did not become ready: {log_path.read_text()}")


def stop_server(process: subprocess.Popen) -> int:
    process.send_signal(signal.SIGINT)
    try:
        return process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def server_home() -> Path:
    """A CAPREG_HOME outside pytest's tmp dirs: concurrent pytest runs prune each other's old ones."""
    return Path(tempfile.mkdtemp(prefix="capreg-home-"))


@pytest.fixture(scope="session")
def live_server(database_url):
    """One real `capreg serve` for the session, on this run's fresh database (on the embedded server
    or DATABASE_URL's), so tokens minted by the in-process app's keys verify on it too. `capreg serve`
    starting its own embedded PostgreSQL is tested by tests/cli/test_cli.py and CI's wheel install."""
    home = server_home()
    process, base, env = start_server(home, database_url)
    yield base, env, home
    stop_server(process)
    shutil.rmtree(home, ignore_errors=True)


async def retire_versions(client, mint, db, tenant: str, skill_id: str, version: str | None = None) -> None:
    """Retire versions of a skill through the lifecycle endpoint, as an admin would (so the change
    feed and every per-process cache see it)."""
    rows = await db.fetch(
        "SELECT agent_id, version FROM capability_versions WHERE tenant = $1 AND skill_id = $2 AND ($3::text IS NULL OR version = $3)",
        tenant,
        skill_id,
        version,
    )
    assert rows, f"no {skill_id} versions to retire"
    admin = mint(tenant, "lifecycle-admin", "registry:admin")
    for row in rows:
        path = f"/v1/agents/{tenant}/{row['agent_id']}/skills/{skill_id}/versions/{row['version']}/retire"
        response = await client.post(path, headers=admin)
        assert response.status_code == 200, response.text


def pytest_collection_modifyitems(config, items):
    """Mark every test that reaches the test PostgreSQL server (each database fixture depends on
    `server_url`): CI's second run, against another server flavour, takes only these."""
    for item in items:
        if "server_url" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.database)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Say plainly when the browser tests (tests/console/test_console_browser.py) did not run, and why."""
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if "test_console_browser" in r.nodeid]
    if skipped:
        reason = skipped[0].longrepr[2] if isinstance(skipped[0].longrepr, tuple) else str(skipped[0].longrepr)
        terminalreporter.write_line(f"{reason.removeprefix('Skipped: ')} ({len(skipped)} tests)", yellow=True)


@pytest_asyncio.fixture(loop_scope="session")
async def fresh_database(server_url):
    """A database of its own: a walkthrough (README, docs/client.md) starts from nothing, as on a fresh machine."""
    async with scratch_database(server_url, "readme") as url:
        yield url


@pytest.fixture
def fresh_server(fresh_database):
    """A real `capreg serve` on a fresh database: (base URL, its environment, its CAPREG_HOME)."""
    home = server_home()
    process, base, env = start_server(home, fresh_database)
    try:
        yield base, env, home
    finally:
        stop_server(process)
        shutil.rmtree(home, ignore_errors=True)


def scratch_checkout(tmp_path: Path) -> Path:
    """A scratch folder standing in for the checkout (its tests/, examples/ and .venv linked), so that
    files a walkthrough writes stay out of the repository."""
    work = tmp_path / "checkout"
    work.mkdir()
    for name in ("tests", "examples", ".venv"):
        if (ROOT / name).exists():
            (work / name).symlink_to(ROOT / name)
    return work
