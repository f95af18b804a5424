"""Settings: every knob capreg reads from the environment, with its documented default."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

import msgspec

from auth.issuers import TrustedIssuer
from db.pool import COMMAND_TIMEOUT
from registry.core.publisher_domains import PublisherDomainError, parse_publisher_domains


class Settings(msgspec.Struct, kw_only=True):
    database_url: str | None = None
    home: Path = Path(".capreg")
    audience: str = "capreg"
    issuer: str = "capreg"
    public_url: str | None = None
    max_body: int = 1024 * 1024
    trusted_issuers: list[TrustedIssuer] = []
    ticket_max_ttl: int = 900
    approval_ttl: int = 3600
    host: str = "127.0.0.1"
    port: int = 8080
    rate_limit: float = 0.0
    rate_burst: int = 0
    pool_min: int = 2
    pool_max: int = 10
    # Anonymous and ranked reads' own connections and admission (registry.core.read_admission).
    read_pool_max: int = 4
    read_queue: int = 64  # reads waiting for one of them at most; more are shed (503)
    read_queue_wait: float = 1.0  # seconds one waits at most before it is shed
    read_statement_timeout: float = 5.0  # seconds; below db.pool.COMMAND_TIMEOUT
    checkpoint_interval: int = 300  # seconds between signed audit checkpoints; 0 disables
    chain_check_interval: float = 10.0  # GET /v1/audit/chain: at most one fresh check per caller this often
    # Proxies (addresses or CIDR networks) whose X-Forwarded-For names the client; none by default.
    trusted_proxies: list[str] = []
    retention_days: int = 30  # expired idempotency keys and old approvals are pruned after this
    # ARD (docs/api.md#ard): tenant -> publisher domain, and the manifest's host name.
    publisher_domains: dict[str, str] = {}
    display_name: str = "capreg"
    # Loopback hosts in registrants' URLs (registry.agents.endpoint_urls); None: allowed when capreg
    # itself listens on a loopback address.
    allow_loopback_urls: bool | None = None
    max_instances: int = 1000  # live instances per agent (docs/api.md#heartbeats)
    # Agents one tenant may register (docs/security.md#round-4); 0: no bound.
    max_agents_per_tenant: int = 100_000
    # Bytes all per-process response caches of one worker may hold together (registry.core.response_cache).
    cache_budget: int = 64 * 1024 * 1024
    # Ranked search also finds records by meaning (registry.search.embeddings), fused with words;
    # CAPREG_SEARCH_MEANING=0 switches it off (words only, about 80 MB less per worker).
    search_meaning: bool = True
    # `capreg serve`'s worker processes (CAPREG_WORKERS, or --workers): one per usable core, at most
    # WORKERS_MAX (each keeps its own search engine and caches: docs/deployment.md#workers).
    workers: int = 1
    # The access log's level on the `capreg.access` logger (registry.web.observability.AccessLog):
    # CAPREG_ACCESS_LOG=off switches it off, a level name (debug, info, warning) sets it.
    access_log: str = "info"


# Beyond this many workers per node, add replicas: each worker holds its own engine (up to about
# 0.5 GB at 100,000 agents with meaning on) and its own database connections.
WORKERS_MAX = 8


def default_workers() -> int:
    """One worker per core this process may run on (its CPU affinity, as a container limits it), at
    most WORKERS_MAX."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, WORKERS_MAX))


def _number(env: dict[str, str], name: str, default, kind=int):
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return kind(raw)
    except ValueError:
        raise SystemExit(f"{name} must be {'an integer' if kind is int else 'a number'}, got {raw!r}") from None


def load_settings(env: dict[str, str] | None = None) -> Settings:
    """Read settings from the environment (or a given mapping, for tests)."""
    env = dict(os.environ if env is None else env)
    issuers = trusted_issuers(env.get("CAPREG_TRUSTED_ISSUERS", "").strip())
    proxies = [p.strip() for p in (env.get("CAPREG_TRUSTED_PROXIES") or "").split(",") if p.strip()]
    for proxy in proxies:
        try:
            ipaddress.ip_network(proxy, strict=False)
        except ValueError:
            raise SystemExit(f"CAPREG_TRUSTED_PROXIES: {proxy!r} is not an IP address or network") from None
    try:
        publisher_domains = parse_publisher_domains(env.get("CAPREG_PUBLISHER_DOMAINS") or "")
    except PublisherDomainError as exc:
        raise SystemExit(str(exc)) from None
    return Settings(
        database_url=env.get("DATABASE_URL") or None,
        home=Path(env.get("CAPREG_HOME") or ".capreg"),
        audience=env.get("CAPREG_AUDIENCE") or "capreg",
        issuer=env.get("CAPREG_ISSUER") or "capreg",
        public_url=(env.get("CAPREG_PUBLIC_URL") or "").rstrip("/") or None,
        max_body=_number(env, "CAPREG_MAX_BODY", 1024 * 1024),
        trusted_issuers=issuers,
        ticket_max_ttl=_number(env, "CAPREG_TICKET_MAX_TTL", 900),
        approval_ttl=_number(env, "CAPREG_APPROVAL_TTL", 3600),
        host=env.get("CAPREG_HOST") or "127.0.0.1",
        port=_number(env, "CAPREG_PORT", 8080),
        rate_limit=_number(env, "CAPREG_RATE_LIMIT", 0.0, float),
        rate_burst=_number(env, "CAPREG_RATE_BURST", 0),
        pool_min=_number(env, "CAPREG_POOL_MIN", 2),
        pool_max=_number(env, "CAPREG_POOL_MAX", 10),
        read_pool_max=_positive(env, "CAPREG_READ_POOL_MAX", 4),
        read_queue=_number(env, "CAPREG_READ_QUEUE", 64),
        read_queue_wait=_number(env, "CAPREG_READ_QUEUE_WAIT", 1.0, float),
        read_statement_timeout=_read_statement_timeout(env),
        checkpoint_interval=_number(env, "CAPREG_CHECKPOINT_INTERVAL", 300),
        chain_check_interval=_number(env, "CAPREG_CHAIN_CHECK_INTERVAL", 10.0, float),
        trusted_proxies=proxies,
        retention_days=_number(env, "CAPREG_RETENTION_DAYS", 30),
        publisher_domains=publisher_domains,
        display_name=(env.get("CAPREG_DISPLAY_NAME") or "capreg")[:200],
        allow_loopback_urls=_flag(env, "CAPREG_ALLOW_LOOPBACK_URLS"),
        max_instances=_number(env, "CAPREG_MAX_INSTANCES", 1000),
        max_agents_per_tenant=_number(env, "CAPREG_MAX_AGENTS_PER_TENANT", 100_000),
        cache_budget=_number(env, "CAPREG_CACHE_BUDGET", 64 * 1024 * 1024),
        search_meaning=_flag(env, "CAPREG_SEARCH_MEANING") is not False,
        workers=_positive(env, "CAPREG_WORKERS", default_workers()),
        access_log=_access_log_level(env),
    )


ACCESS_LOG_LEVELS = ("off", "debug", "info", "warning", "error")


def _access_log_level(env: dict[str, str]) -> str:
    level = (env.get("CAPREG_ACCESS_LOG") or "info").strip().lower()
    if level not in ACCESS_LOG_LEVELS:
        raise SystemExit(f"CAPREG_ACCESS_LOG must be one of {', '.join(ACCESS_LOG_LEVELS)}, got {level!r}")
    return level


def _positive(env: dict[str, str], name: str, default: int) -> int:
    value = _number(env, name, default)
    if value < 1:
        raise SystemExit(f"{name} must be at least 1, got {value}")
    return value


def _read_statement_timeout(env: dict[str, str]) -> float:
    # Below the command timeout, so the server cancels a slow read before the client gives up on it
    # (its connection then comes back usable, and the caller gets 503 retryable_unavailable).
    value = _number(env, "CAPREG_READ_STATEMENT_TIMEOUT", 5.0, float)
    if not 0 < value < COMMAND_TIMEOUT:
        raise SystemExit(f"CAPREG_READ_STATEMENT_TIMEOUT must be above 0 and below {COMMAND_TIMEOUT:g} seconds")
    return value


def _flag(env: dict[str, str], name: str) -> bool | None:
    raw = (env.get(name) or "").strip()
    if raw == "":
        return None
    if raw not in ("0", "1"):
        raise SystemExit(f"{name} must be 0 or 1, got {raw!r}")
    return raw == "1"


def registry_url(settings: Settings) -> str:
    """The registry's own base URL, the one answer for every card and every URL capreg signs
    (contract section 19): CAPREG_PUBLIC_URL, else the address capreg listens on. Never taken
    from a request, so `Host` and `X-Forwarded-*` cannot change it."""
    if settings.public_url:
        return settings.public_url
    host = settings.host
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 listen address
    return f"http://{host}:{settings.port}"


def trusted_issuers(raw: str) -> list[TrustedIssuer]:
    """CAPREG_TRUSTED_ISSUERS: a JSON array of issuers; a configuration error stops start-up with a
    message naming the issuer and what it lacks."""
    if not raw:
        return []
    try:
        entries = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise SystemExit(f"CAPREG_TRUSTED_ISSUERS is not valid JSON: {exc}") from None
    if not isinstance(entries, list):
        raise SystemExit("CAPREG_TRUSTED_ISSUERS must be a JSON array of issuers")
    for entry in entries:
        if isinstance(entry, dict) and "tenants" not in entry:
            raise SystemExit(
                f'trusted issuer {entry.get("issuer")!r} has no "tenants": list the tenants it may speak for, '
                'or ["*"] for every tenant'
            )
    try:
        issuers = msgspec.convert(entries, type=list[TrustedIssuer])
    except msgspec.ValidationError as exc:
        raise SystemExit(f"CAPREG_TRUSTED_ISSUERS is not a valid issuer list: {exc}") from None
    for trusted in issuers:
        if bool(trusted.jwks_url) == bool(trusted.jwks_file):
            raise SystemExit(f"trusted issuer {trusted.issuer!r} needs exactly one of jwksUrl or jwksFile")
        if not trusted.tenants or not all(isinstance(t, str) and t for t in trusted.tenants):
            raise SystemExit(f'trusted issuer {trusted.issuer!r}: "tenants" must name at least one tenant, or "*"')
    return issuers
