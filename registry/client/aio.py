"""AsyncRegistry: the asyncio client (httpx.AsyncClient), and its keep-alive task. The same
methods as registry.client.sync.Registry, awaited; iterators are async iterators."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
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


class AsyncRegistry(RegistryBase):
    """A capreg registry over HTTP for asyncio code. Use it from one event loop."""

    def __init__(self, base_url: str, *, http: httpx.AsyncClient | None = None, **options: Any):
        super().__init__(base_url, **options)
        self._own_http = http is None
        self._http = http or httpx.AsyncClient(base_url=self.base_url, timeout=self._timeout)

    async def aclose(self) -> None:
        if self._own_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncRegistry:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _call(self, call: calls.Call, *, retries: bool = True) -> Any:
        attempt = 0
        while True:
            args, cache = self._request_args(call)
            try:
                response = await self._http.request(**args)
            except httpx.TransportError as exc:
                delay = self._retry_delay(attempt, None) if retries and isinstance(exc, httpx.ConnectError) else None
                if delay is None:
                    raise calls.unreachable(self.base_url, exc) from None
            else:
                delay = self._retry_delay(attempt, response) if retries else None
                if delay is None:
                    return self._finish(call, response, cache)
            await asyncio.sleep(delay)
            attempt += 1

    async def _pages(self, call: calls.Call | None) -> AsyncIterator[Any]:
        while call is not None:
            page = await self._call(call)
            for item in page.items:
                yield item
            call = calls.next_page(call, page)

    # -- agents -----------------------------------------------------------------------------

    async def register(
        self,
        tenant: str,
        agent_id: str,
        card: Any,
        *,
        skill_fields: Mapping[str, Mapping[str, Any]] | None = None,
        **fields: Any,
    ) -> Registration:
        body = calls.card_body(card, _camel(fields), skill_fields)
        result = await self._call(calls.register(tenant, agent_id, body))
        self._remember_card(tenant, agent_id, body)
        return result

    async def heartbeat(
        self,
        tenant: str,
        agent_id: str,
        instance_id: str,
        *,
        url: str | None = None,
        ttl: int = 30,
        load: float | None = None,
    ) -> Heartbeat:
        return await self._call(calls.heartbeat(tenant, agent_id, instance_id, url, ttl, load))

    async def agent(self, tenant: str, agent_id: str) -> Agent:
        return await self._call(calls.agent(tenant, agent_id))

    async def withdraw(self, tenant: str, agent_id: str) -> Withdrawal:
        """Withdraw the agent (`registry:admin` of its tenant): every version retired, its leases
        ended, gone from discovery, ARD, offers and new tickets at once; idempotent."""
        return await self._call(calls.withdraw(tenant, agent_id))

    async def agent_card(self, ref: str, *, verify: bool = True) -> dict[str, Any]:
        """As Registry.agent_card: the public A2A card, its registry signature verified (JWKS cached)."""
        card = await self._call(calls.agent_card(*calls.agent_of_ref(ref)))
        if verify:
            if self._card_keys.needs_fetch(signature_kids(card)):
                self._card_keys.store(await self._call(calls.jwks()))
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
    ) -> AsyncKeepAlive:
        """An async context manager heartbeating in a task; see Registry.keep_alive."""
        body = self._keep_alive_card(tenant, agent_id, card, _camel(fields), skill_fields)
        return AsyncKeepAlive(
            self, tenant, agent_id, instance_id, url=url, ttl=ttl, load=load, card=body, fraction=fraction
        )

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
    ) -> AsyncIterator[Capability]:
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

    async def offers(
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
        """Ranked offers for a need (POST /v1/offers); see Registry.offers: capabilities the caller may call now, each with
        its least-loaded live instance; with `ticket` ({"scopes": [...], "ttlSeconds": ...}) the first
        offer carries a ticket, an approval or the refusal. A request with `ticket` is not retried
        (it has no Idempotency-Key, so a retry could mint twice)."""
        return await self._call(
            calls.offers(
                need, skill=skill, tags=tags, region=region, side_effect_max=side_effect_max, limit=limit, ticket=ticket
            ),
            retries=ticket is None,
        )

    async def detail(self, ref: str) -> CapabilityDetail:
        return await self._call(calls.detail(calls.parse_ref(ref)))

    async def tool(self, ref: str, format: str = "openai") -> dict[str, Any]:  # noqa: A002
        return await self._call(calls.tool(calls.parse_ref(ref), format))

    async def tools(self, refs: Iterable[str], format: str = "openai") -> ToolList:  # noqa: A002
        refs = [str(r) for r in refs]
        definitions = await asyncio.gather(*(self.tool(r, format) for r in refs))
        return tool_list(list(zip(refs, definitions, strict=True)), format)

    async def mcp_tools(self, refs: Iterable[str]) -> list[Any]:
        return as_mcp_tools(list(await self.tools(refs, "mcp")))

    async def mint_ticket(
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
        return await self._call(
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

    async def approval(self, approval_id: str) -> Approval:
        return await self._call(calls.approval(approval_id))

    async def introspect(self, ticket: str) -> Introspection:
        return await self._call(calls.introspect(ticket))

    async def revoke(self, jti: str) -> Revocation:
        return await self._call(calls.revoke(jti))

    # -- security teams ---------------------------------------------------------------------

    def grants(
        self,
        *,
        actor: str | None = None,
        skill: str | None = None,
        scope: str | None = None,
        active: bool = True,
        limit: int | None = None,
    ) -> AsyncIterator[Grant]:
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
    ) -> AsyncIterator[AuditEvent]:
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

    async def checkpoint(self) -> Checkpoint:
        return await self._call(calls.checkpoint())

    async def replay(
        self, ref: str, instance_url: str, *, ticket: bool = False, instance: str | None = None
    ) -> ReplayVerdict:
        """Run the baseline's fixtures of the candidate `ref` against `instance_url` and submit the
        report: Registry.replay, for asyncio."""
        from registry.client.a2a import TicketCredentials
        from registry.client.replay import run_fixtures

        target = calls.parse_ref(ref)
        candidate = await self.detail(ref)
        fixtures = (
            (await self.detail(f"{target.tenant}/{target.agent_id}/{target.skill}@{candidate.baseline}")).fixtures
            if candidate.baseline
            else []
        )
        credentials = TicketCredentials(self, ref, scopes=candidate.scopes) if ticket else None
        results = await run_fixtures(fixtures, instance_url, credentials=credentials)
        try:
            return await self._call(calls.submit_replay(target, results, instance), retries=False)
        except CapregError as error:
            verdict = calls.failed_verdict(error)
            if verdict is None:
                raise
            return verdict


class AsyncKeepAlive:
    """The running keep-alive of AsyncRegistry.keep_alive: `async with`, also start()/stop()."""

    def __init__(
        self,
        registry: AsyncRegistry,
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
        self._task: asyncio.Task | None = None
        self.state = KeepAliveState()

    async def __aenter__(self) -> AsyncKeepAlive:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        first_wait = await self._beat(first=True)
        self._task = asyncio.create_task(self._run(first_wait), name=f"capreg-keep-alive-{self._agent_id}")
        self.state.running = True

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.state.running = False

    async def _run(self, wait: float) -> None:
        while True:
            await asyncio.sleep(wait)
            try:
                wait = await self._beat()
            except Exception:  # noqa: BLE001 - the task must keep going; the error is logged and kept
                log.exception("keep_alive: unexpected failure")
                wait = self._schedule.interval

    async def _beat(self, first: bool = False) -> float:
        try:
            try:
                await self._heartbeat()
            except CapregError as error:
                if error.status != 404 or self._card is None:
                    raise
                await self._registry._call(calls.register(self._tenant, self._agent_id, self._card), retries=False)
                self.state.registrations += 1
                self.state.note("registered")
                await self._heartbeat()
        except CapregError as error:
            self.state.failures += 1
            self.state.last_error = error
            self.state.note(f"failed {error.status} {error.code}")
            if first and error.status not in (429, 503, None):
                raise
            log.warning("keep_alive %s/%s: %s", self._tenant, self._agent_id, error)
            return self._schedule.after_failure(error)
        return self._schedule.after_success()

    async def _heartbeat(self) -> None:
        call = calls.heartbeat(
            self._tenant, self._agent_id, self._instance_id, self._url, self._ttl, load_value(self._load)
        )
        result = await self._registry._call(call, retries=False)
        self.state.beats += 1
        self.state.health = result.health
        self.state.note("beat")
