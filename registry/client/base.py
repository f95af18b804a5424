"""What Registry and AsyncRegistry share besides the calls: configuration, headers, the ETag cache,
tool lists, and the keep-alive schedule (when to heartbeat next, when to re-register)."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from registry.client import calls
from registry.client.errors import CapregError
from registry.client.signing import CardKeys

log = logging.getLogger("registry.client")

DEFAULT_TIMEOUT = 10.0


class RegistryBase:
    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        token_provider: Callable[[], str | None] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = 3,
        backoff: float = 0.5,
        max_retry_wait: float = 30.0,
        etag_cache_size: int = 256,
        headers: Mapping[str, str] | None = None,
    ):
        if token is not None and token_provider is not None:
            raise ValueError("give token or token_provider, not both")
        self.base_url = base_url.rstrip("/")
        self._token, self._token_provider = token, token_provider
        self.retry_policy = calls.RetryPolicy(retries=retries, backoff=backoff, max_wait=max_retry_wait)
        self._etags = calls.EtagCache(etag_cache_size)
        self._timeout = timeout
        self._extra_headers = dict(headers or {})
        self._cards: dict[tuple[str, str], bytes] = {}  # last registration body per agent, for keep_alive
        self._card_keys = CardKeys()  # the registry's JWKS, for agent_card(verify=True)

    def _headers(self, call: calls.Call) -> dict[str, str]:
        headers = {"User-Agent": calls.USER_AGENT, "Accept": "application/json", **self._extra_headers, **call.headers}
        token = self._token_provider() if self._token_provider is not None else self._token
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _request_args(self, call: calls.Call) -> tuple[dict[str, Any], tuple | None]:
        """httpx request arguments, and for a cacheable call its cache key with the entry it
        revalidates (kept here, so a 304 is answered even if the entry is evicted meanwhile)."""
        headers = self._headers(call)
        cache = None
        if call.cacheable:
            key = (call.path, tuple(call.params), headers.get("Authorization"))
            cached = self._etags.lookup(key)
            if cached is not None:
                headers["If-None-Match"] = cached[0]
            cache = (key, cached)
        return {
            "method": call.method,
            "url": call.path,
            "params": call.params,
            "content": call.body,
            "headers": headers,
        }, cache

    def _answer(self, response: httpx.Response, cache: tuple | None) -> tuple[int, bytes]:
        """(status, body) after the ETag cache: a 304 becomes the cached 200."""
        if cache is not None:
            key, cached = cache
            if response.status_code == 304 and cached is not None:
                return 200, cached[1]
            if response.status_code == 200 and response.headers.get("etag"):
                self._etags.store(key, response.headers["etag"], response.content)
        return response.status_code, response.content

    def _retry_delay(self, attempt: int, response: httpx.Response | None) -> float | None:
        if response is not None and response.status_code not in calls.RETRIED_STATUSES:
            return None
        retry_after = calls.retry_after_seconds(response.headers.get("retry-after")) if response is not None else None
        return self.retry_policy.delay(attempt, retry_after)

    def _finish(self, call: calls.Call, response: httpx.Response, cache: tuple | None) -> Any:
        status, body = self._answer(response, cache)
        return calls.read_answer(call, status, body, calls.retry_after_seconds(response.headers.get("retry-after")))

    def _remember_card(self, tenant: str, agent_id: str, body: bytes) -> None:
        self._cards[(tenant, agent_id)] = body

    def _keep_alive_card(
        self,
        tenant: str,
        agent_id: str,
        card: Any,
        fields: Mapping[str, Any] | None,
        skill_fields: Mapping[str, Mapping[str, Any]] | None,
    ) -> bytes | None:
        if card is not None:
            return calls.card_body(card, fields, skill_fields)
        return self._cards.get((tenant, agent_id))


def tool_list(definitions: list[tuple[str, dict[str, Any]]], format: str) -> ToolList:  # noqa: A002
    """Tools for an LLM API from (ref, definition) pairs; names made unique (a skill id offered by
    two agents), and each name mapped back to its capability ref."""
    tools = ToolList()
    for ref, definition in definitions:
        holder = definition["function"] if format == "openai" else definition
        name, n = holder["name"], 2
        while name in tools.refs:
            suffix = f"_{n}"
            name = holder["name"][: 64 - len(suffix)] + suffix
            n += 1
        holder["name"] = name
        tools.refs[name] = ref
        tools.append(definition)
    return tools


class ToolList(list):
    """A list of tool definitions as an LLM API takes them; `refs` maps each tool name back to the
    capability ref to mint a ticket for when the model calls it."""

    def __init__(self, *args: Any):
        super().__init__(*args)
        self.refs: dict[str, str] = {}


def as_mcp_tools(definitions: list[dict[str, Any]]) -> list[Any]:
    try:
        from mcp.types import Tool
    except ImportError:
        raise CapregError("mcp_tools needs the mcp package (pip install mcp)", code="missing_dependency") from None
    return [Tool.model_validate(d) for d in definitions]


# ---------------------------------------------------------------------------
# keep_alive


@dataclass
class KeepAliveState:
    """How a keep-alive is doing (read it from any thread; the keep-alive alone writes it)."""

    beats: int = 0
    registrations: int = 0
    failures: int = 0
    last_error: CapregError | None = None
    health: str | None = None
    running: bool = False
    history: list[str] = field(default_factory=list)  # last outcomes, newest last (bounded)

    def note(self, outcome: str) -> None:
        self.history.append(outcome)
        del self.history[:-20]


@dataclass
class KeepAliveSchedule:
    """When to heartbeat next: every `interval` seconds while the registry answers; after a 429 or
    503 its Retry-After (else exponential backoff), never longer than the interval; after a failed
    connection, backoff."""

    ttl: int
    interval: float
    failures_in_row: int = 0

    @classmethod
    def for_ttl(cls, ttl: int, fraction: float) -> KeepAliveSchedule:
        if not 0 < fraction < 1:
            raise ValueError("fraction must be between 0 and 1")
        return cls(ttl=ttl, interval=max(0.5, ttl * fraction))

    def after_success(self) -> float:
        self.failures_in_row = 0
        return self.interval

    def after_failure(self, error: CapregError) -> float:
        self.failures_in_row += 1
        if error.retry_after is not None:
            return min(error.retry_after, self.interval)
        return min(self.interval, 0.5 * 2 ** (self.failures_in_row - 1) * (0.5 + random.random()))


def load_value(load: Callable[[], float] | float | None) -> float | None:
    if load is None:
        return None
    if callable(load):
        try:
            return float(load())
        except Exception:  # noqa: BLE001 - a failing load probe must not stop the heartbeats
            log.exception("keep_alive: the load callable failed; heartbeat sent without load")
            return None
    return float(load)
