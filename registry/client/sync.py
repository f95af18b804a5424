"""Registry: the blocking client (httpx.Client), and its keep-alive thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import httpx

from registry.client import calls
from registry.client.base import (
    KeepAliveSchedule,
    KeepAliveState,
    RegistryBase,
    ToolList,
    as_mcp_tools,
    load_value,
    log,
    tool_list,
)
from registry.client.calls import camel_fields as _camel
from registry.client.calls import time_param as _time
from registry.client.errors import CapregError
from registry.client.results import (
    Agent,
    Approval,
    AuditEvent,
    Capability,
    CapabilityDetail,
    Checkpoint,
    Grant,
    Heartbeat,
    Introspection,
    Offers,
    Registration,
    ReplayVerdict,
    Revocation,
    Ticket,
    Withdrawal,
)
from registry.client.signing import signature_kids, verify_card


class Registry(RegistryBase):
    """A capreg registry over HTTP. Thread-safe: one instance may serve every thread of a process.

    Registry("http://127.0.0.1:8080", token="...")  or  token_provider=callable returning a token.
    """

    def __init__(self, base_url: str, *, http: httpx.Client | None = None, **options: Any):
        super().__init__(base_url, **options)
        self._own_http = http is None
        self._http = http or httpx.Client(base_url=self.base_url, timeout=self._timeout)

    def close(self) -> None:
        if self._own_http:
            self._http.close()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, call: calls.Call, *, retries: bool = True) -> Any:
        attempt = 0
        while True:
            args, cache = self._request_args(call)
            try:
                response = self._http.request(**args)
            except httpx.TransportError as exc:
                # Only a connection never made is retried: the registry cannot have acted on it.
                delay = self._retry_delay(attempt, None) if retries and isinstance(exc, httpx.ConnectError) else None
                if delay is None:
                    raise calls.unreachable(self.base_url, exc) from None
            else:
                delay = self._retry_delay(attempt, response) if retries else None
                if delay is None:
                    return self._finish(call, response, cache)
            time.sleep(delay)
            attempt += 1

    def _pages(self, call: calls.Call | None) -> Iterator[Any]:
        while call is not None:
            page = self._call(call)
            yield from page.items
            call = calls.next_page(call, page)

    # -- agents -----------------------------------------------------------------------------

    def register(
        self,
        tenant: str,
        agent_id: str,
        card: Any,
        *,
        skill_fields: Mapping[str, Mapping[str, Any]] | None = None,
        **fields: Any,
    ) -> Registration:
        """Register or update an agent: `card` is a dict, a JSON file path or an a2a-sdk AgentCard;
        `fields` adds top-level registry fields (visibility=..., sharedWith=[...]), `skill_fields`
        per-skill ones ({"invoice.lookup": {"version": "2.0.0", "sideEffect": "none", ...}})."""
        body = calls.card_body(card, _camel(fields), skill_fields)
        result = self._call(calls.register(tenant, agent_id, body))
        self._remember_card(tenant, agent_id, body)
        return result

    def heartbeat(
        self,
        tenant: str,
        agent_id: str,
        instance_id: str,
        *,
        url: str | None = None,
        ttl: int = 30,
        load: float | None = None,
    ) -> Heartbeat:
        return self._call(calls.heartbeat(tenant, agent_id, instance_id, url, ttl, load))

    def agent(self, tenant: str, agent_id: str) -> Agent:
        return self._call(calls.agent(tenant, agent_id))

    def withdraw(self, tenant: str, agent_id: str) -> Withdrawal:
        """Withdraw the agent (`registry:admin` of its tenant): every version retired, its leases
        ended, gone from discovery, ARD, offers and new tickets at once; idempotent."""
        return self._call(calls.withdraw(tenant, agent_id))

    def agent_card(self, ref: str, *, verify: bool = True) -> dict[str, Any]:
        """The agent's public A2A card ("tenant/agentId", or a capability ref), as a dict. With
        `verify`, the registry's signature is checked first with a2a-sdk's verifier against this
        registry's JWKS (cached): CapregError(code="invalid_signature") when it does not verify."""
        card = self._call(calls.agent_card(*calls.agent_of_ref(ref)))
        if verify:
            if self._card_keys.needs_fetch(signature_kids(card)):
                self._card_keys.store(self._call(calls.jwks()))
            verify_card(card, self._card_keys)
        return card

    def keep_alive(
        self,
        tenant: str,
        agent_id: str,
        instance_id: str,
        *,
        url: str | None = None,
        ttl: int = 30,
        load: Callable[[], float] | float | None = None,
        card: Any = None,
        fraction: float = 1 / 3,
        skill_fields: Mapping[str, Mapping[str, Any]] | None = None,
        **fields: Any,
    ) -> KeepAlive:
        """A context manager heartbeating in a background thread every `ttl * fraction` seconds.

        On entry one heartbeat is sent at once (a bad token fails there, not in the background).
        A 404 (the registry lost or never had the agent) re-registers with `card`, or with the
        last card this client registered for the agent, then heartbeats again."""
        body = self._keep_alive_card(tenant, agent_id, card, _camel(fields), skill_fields)
        return KeepAlive(self, tenant, agent_id, instance_id, url=url, ttl=ttl, load=load, card=body, fraction=fraction)

    # -- routers ----------------------------------------------------------------------------

    def discover(
        self,
        q: str | None = None,
        *,
        tag: str | list[str] | None = None,
        skill: str | None = None,
        side_effect_max: str | None = None,
        region: str | None = None,
        health: str | None = None,
        agent: str | None = None,
        tenant: str | None = None,
        status: str | None = None,
        versions: str | None = None,
        limit: int | None = None,
    ) -> Iterator[Capability]:
        """Every matching capability, page after page (answers revalidated by ETag)."""
        return self._pages(
            calls.discover(
                q=q,
                tag=tag,
                skill=skill,
                sideEffectMax=side_effect_max,
                region=region,
                health=health,
                agent=agent,
                tenant=tenant,
                status=status,
                versions=versions,
                limit=limit,
            )
        )

    def offers(
        self,
        need: str | None = None,
        *,
        skill: str | None = None,
        tags: Iterable[str] | None = None,
        region: str | None = None,
        side_effect_max: str | None = None,
        limit: int | None = None,
        ticket: Mapping[str, Any] | None = None,
    ) -> Offers:
        """Ranked offers for a need (POST /v1/offers): capabilities the caller may call now, each with
        its least-loaded live instance; with `ticket` ({"scopes": [...], "ttlSeconds": ...}) the first
        offer carries a ticket, an approval or the refusal. A request with `ticket` is not retried
        (it has no Idempotency-Key, so a retry could mint twice)."""
        return self._call(
            calls.offers(
                need, skill=skill, tags=tags, region=region, side_effect_max=side_effect_max, limit=limit, ticket=ticket
            ),
            retries=ticket is None,
        )

    def detail(self, ref: str) -> CapabilityDetail:
        """Schemas, examples and endpoints of "tenant/agent/skill@version-or-range" (default latest)."""
        return self._call(calls.detail(calls.parse_ref(ref)))

    def tool(self, ref: str, format: str = "openai") -> dict[str, Any]:  # noqa: A002
        return self._call(calls.tool(calls.parse_ref(ref), format))

    def tools(self, refs: Iterable[str], format: str = "openai") -> ToolList:  # noqa: A002
        """The tool list an LLM API takes (OpenAI `tools=` or MCP tool definitions); `.refs` maps
        each tool name back to its capability ref."""
        return tool_list([(str(r), self.tool(r, format)) for r in refs], format)

    def mcp_tools(self, refs: Iterable[str]) -> list[Any]:
        """The capabilities as `mcp.types.Tool` objects (needs the mcp package)."""
        return as_mcp_tools(list(self.tools(refs, "mcp")))

    def mint_ticket(
        self,
        ref: str,
        scopes: Iterable[str],
        ttl: int | None = 300,
        on_behalf_of: str | None = None,
        resources: Iterable[str] | None = None,
        parent_ticket: str | None = None,
        idempotency_key: str | None = None,
        *,
        max_depth: int = 0,
    ) -> Ticket | Approval:
        """A delegation ticket for `ref` (an Approval instead when the capability requires one)."""
        return self._call(
            calls.mint_ticket(
                calls.parse_ref(ref),
                scopes=scopes,
                ttl=ttl,
                on_behalf_of=on_behalf_of,
                resources=resources,
                parent_ticket=parent_ticket,
                max_depth=max_depth,
                idempotency_key=idempotency_key,
            )
        )

    def approval(self, approval_id: str) -> Approval:
        return self._call(calls.approval(approval_id))

    def introspect(self, ticket: str) -> Introspection:
        return self._call(calls.introspect(ticket))

    def revoke(self, jti: str) -> Revocation:
        return self._call(calls.revoke(jti))

    # -- security teams ---------------------------------------------------------------------

    def grants(
        self,
        *,
        actor: str | None = None,
        skill: str | None = None,
        scope: str | None = None,
        active: bool = True,
        limit: int | None = None,
    ) -> Iterator[Grant]:
        return self._pages(calls.grants(actor=actor, skill=skill, scope=scope, active=active, limit=limit))

    def audit_events(
        self,
        *,
        type: str | None = None,
        actor: str | None = None,
        skill: str | None = None,  # noqa: A002
        scope: str | None = None,
        since: str | None = None,
        until: str | None = None,
        limit: int | None = None,
    ) -> Iterator[AuditEvent]:
        return self._pages(
            calls.audit_events(
                type=type,
                actor=actor,
                skill=skill,
                scope=scope,
                since=_time(since),
                until=_time(until),
                limit=limit,
            )
        )

    def checkpoint(self) -> Checkpoint:
        return self._call(calls.checkpoint())

    def replay(
        self, ref: str, instance_url: str, *, ticket: bool = False, instance: str | None = None
    ) -> ReplayVerdict:
        """Run the baseline's fixtures of the candidate `ref` (its exact version) against the A2A
        endpoint `instance_url` and submit the report (docs/api.md#the-replay-gate): the verdict,
        `passed` (the candidate is now active) or `failed` (one error per failing fixture).
        `ticket`: present a capreg ticket for `ref` on each call. Needs the a2a extra; from async
        code, use AsyncRegistry.replay."""
        import asyncio

        from registry.client.a2a import TicketCredentials
        from registry.client.replay import run_fixtures

        target = calls.parse_ref(ref)
        candidate = self.detail(ref)
        fixtures = (
            self.detail(f"{target.tenant}/{target.agent_id}/{target.skill}@{candidate.baseline}").fixtures
            if candidate.baseline
            else []
        )
        credentials = TicketCredentials(self, ref, scopes=candidate.scopes) if ticket else None
        results = asyncio.run(run_fixtures(fixtures, instance_url, credentials=credentials))
        try:
            return self._call(calls.submit_replay(target, results, instance), retries=False)
        except CapregError as error:
            verdict = calls.failed_verdict(error)
            if verdict is None:
                raise
            return verdict


class KeepAlive:
    """The running keep-alive of Registry.keep_alive: a context manager, also start()/stop()."""

    def __init__(
        self,
        registry: Registry,
        tenant: str,
        agent_id: str,
        instance_id: str,
        *,
        url: str | None,
        ttl: int,
        load: Callable[[], float] | float | None,
        card: bytes | None,
        fraction: float,
    ):
        self._registry, self._tenant, self._agent_id, self._instance_id = registry, tenant, agent_id, instance_id
        self._url, self._ttl, self._load, self._card = url, ttl, load, card
        self._schedule = KeepAliveSchedule.for_ttl(ttl, fraction)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.state = KeepAliveState()

    def __enter__(self) -> KeepAlive:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        # Errors other than 429/503/unreachable surface here, in the caller's thread.
        self._first_wait = self._beat(first=True)
        self._thread = threading.Thread(target=self._run, name=f"capreg-keep-alive-{self._agent_id}", daemon=True)
        self.state.running = True
        self._thread.start()

    def stop(self, timeout: float | None = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.state.running = False

    def _run(self) -> None:
        wait = self._first_wait
        while not self._stop.wait(wait):
            try:
                wait = self._beat()
            except Exception:  # noqa: BLE001 - the thread must keep going; the error is logged and kept
                log.exception("keep_alive: unexpected failure")
                wait = self._schedule.interval

    def _beat(self, first: bool = False) -> float:
        """One heartbeat (re-registering on 404); returns the seconds to wait before the next."""
        try:
            try:
                self._heartbeat()
            except CapregError as error:
                if error.status != 404 or self._card is None:
                    raise
                self._registry._call(calls.register(self._tenant, self._agent_id, self._card), retries=False)
                self.state.registrations += 1
                self.state.note("registered")
                self._heartbeat()
        except CapregError as error:
            self.state.failures += 1
            self.state.last_error = error
            self.state.note(f"failed {error.status} {error.code}")
            if first and error.status not in (429, 503, None):
                raise
            log.warning("keep_alive %s/%s: %s", self._tenant, self._agent_id, error)
            return self._schedule.after_failure(error)
        return self._schedule.after_success()

    def _heartbeat(self) -> None:
        call = calls.heartbeat(
            self._tenant, self._agent_id, self._instance_id, self._url, self._ttl, load_value(self._load)
        )
        result = self._registry._call(call, retries=False)
        self.state.beats += 1
        self.state.health = result.health
        self.state.note("beat")
