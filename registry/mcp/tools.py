"""The MCP tools: the five tools LLM routers use to find capabilities, read their schemas and obtain
delegation tickets, and `find_capability` (offers), as `tools/list` lists them and `tools/call` runs
them (`call_tool`; the JSON-RPC around them is registry.mcp.jsonrpc).

The tools call the services the HTTP API calls (registry.discovery.service.discovery_page,
registry.offers.service.make_offers, registry.release.service.release, registry.tickets.service.request_ticket),
for the caller the HTTP request authenticated; a refusal is a tool result with `isError: true` whose
structured content is the problem body the HTTP API would have answered. Arguments that do not fit a
tool's input schema (registry.mcp.tool_arguments) are a tool result with `isError: true` too (MCP
2025-11-25: so the model can correct itself), and so is a value PostgreSQL cannot store
(registry.core.storable, the same check as every HTTP body's).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import msgspec

from auth.principal import Caller
from registry.core.problems import (
    ErrorItem,
    ProblemError,
    RefusalSubject,
    decode_error_item,
    invalid_request,
    invalid_token,
    problem_of,
    unacceptable_value,
)
from registry.core.storable import unstorable_pointer
from registry.discovery.service import DiscoveryQuery, discovery_page, parse_capability_ref, viewer_tenant
from registry.mcp.tool_arguments import (
    CapabilityArguments,
    FindArguments,
    SearchArguments,
    TicketArguments,
    ToolDefinitionArguments,
)
from registry.offers import service as offer_service
from registry.offers.operations import OFFERS
from registry.operations.boundary import Operation, run
from registry.operations.refusals import REFUSED, record_refusal
from registry.release import service as release
from registry.release.operations import DETAIL
from registry.state import Registry
from registry.tickets.operations import MINT
from registry.tickets.request import TicketRequestBody
from registry.tickets.service import request_ticket

INSTRUCTIONS = (
    "capreg is a registry of capabilities (skills) offered by AI agents. Use it to find an agent that can "
    "do a task, learn how to call it, and obtain a short-lived delegation ticket to call it with. "
    "Quickest: find_capability (describe the need; get ranked offers you may call now, with an instance). "
    "Typical flow: search_capabilities (public metadata, no schemas) -> get_capability (input and output "
    "schemas, examples and endpoints; needs a token holding the capability's scopes) -> request_ticket "
    "(a signed ticket for exactly the scopes you need) -> call the agent at one of its endpoints with the "
    "ticket. Capabilities are named by a ref 'tenant/agentId/skillId@version', where version is exact "
    "('2.0.0'), 'latest', or a range ('^2'). Side-effect levels, from harmless to dangerous: none (reads "
    "only) < idempotent (writes, but repeating is harmless) < write (changes state) < destructive (deletes "
    "or cannot be undone). A refusal comes back as a tool error whose content is a problem object with a "
    "`code` (for example insufficient_scope, not_found, delegation_denied) explaining why."
)


class Call(msgspec.Struct, frozen=True):
    """One tools/call: who calls, with which trace id."""

    registry: Registry
    caller: Caller | None
    trace_id: str | None


class ToolResult(msgspec.Struct, frozen=True):
    body: dict[str, Any]
    note: str | None = None


def _authenticated(call: Call) -> Caller:
    assert call.caller is not None  # call_tool refuses anonymous calls of tools that need a caller
    return call.caller


async def search_capabilities(call: Call, args: SearchArguments) -> ToolResult:
    tags = (args.tag,) if isinstance(args.tag, str) else tuple(args.tag) if args.tag else None
    query = DiscoveryQuery(
        q=args.q,
        tags=tags,
        side_effect_max=args.side_effect_max,
        region=args.region,
        limit=args.limit,
        cursor=args.cursor,
    )
    entry = await discovery_page(call.registry, viewer_tenant(call.caller), query)
    return ToolResult(msgspec.json.decode(entry.body))


async def _release(call: Call, ref: str) -> release.Released:
    caller = _authenticated(call)
    parts = parse_capability_ref(ref)
    return await release.release(
        call.registry,
        caller,
        tenant=parts.tenant,
        agent_id=parts.agent_id,
        skill_id=parts.skill_id,
        version=parts.version,
        trace_id=call.trace_id,
    )


async def get_capability(call: Call, args: CapabilityArguments) -> ToolResult:
    released = await _release(call, args.ref)
    return ToolResult(msgspec.to_builtins(release.detail_of(released)))


async def get_tool_definition(call: Call, args: ToolDefinitionArguments) -> ToolResult:
    released = await _release(call, args.ref)
    return ToolResult(release.tool_definition(released, args.format))


async def request_ticket_tool(call: Call, args: TicketArguments) -> ToolResult:
    """POST /v1/tickets' operation (MINT) with the tool's arguments as its body; run at the boundary
    by call_tool, which records a refusal, a body that does not fit included, as `ticket.denied`."""
    caller = _authenticated(call)
    parts = parse_capability_ref(args.ref)
    try:
        body = msgspec.convert(
            {
                "audience": f"{parts.tenant}/{parts.agent_id}",
                "skill": parts.skill_id,
                "version": parts.version,
                "scopes": args.scopes,
                "resources": args.resources,
                "onBehalfOf": args.on_behalf_of,
                "ttlSeconds": args.ttl_seconds,
            },
            TicketRequestBody,
        )
    except msgspec.ValidationError as exc:
        raise invalid_request("the ticket request is malformed", [decode_error_item(exc, TicketRequestBody)]) from None
    answer = await request_ticket(
        call.registry, caller, body, idempotency_key=args.idempotency_key, trace_id=call.trace_id
    )
    if answer.body.get("status") == "pending":
        approval_id = answer.body.get("approvalId")
        return ToolResult(
            answer.body,
            note=(
                f"Approval pending (approvalId {approval_id}): this capability requires approval. An admin of the "
                f"capability's tenant must approve it; then fetch GET /v1/approvals/{approval_id} with the same "
                "token to collect the ticket. No ticket was issued yet."
            ),
        )
    return ToolResult(answer.body)


async def find_capability(call: Call, args: FindArguments) -> ToolResult:
    """POST /v1/offers' operation (OFFERS), run at the boundary by call_tool."""
    caller = _authenticated(call)
    body = offer_service.OfferRequest(
        need=args.need, region=args.region, side_effect_max=args.side_effect_max, limit=args.limit
    )
    answer = await offer_service.make_offers(call.registry, caller, body, trace_id=call.trace_id)
    note = (
        None
        if answer.offers
        else (
            "No capability can be offered to you now. `excluded` counts those you can see but were left out: "
            "scope (your token lacks a scope they need), region (their data regions do not meet yours or the "
            "region asked for), unhealthy (no live instance)."
        )
    )
    return ToolResult(msgspec.to_builtins(answer), note=note)


class Tool(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    title: str
    description: str
    arguments: type
    run: Callable[[Call, Any], Awaitable[ToolResult]]
    annotations: dict[str, bool]
    # Needs a bearer token: anonymous calls are refused (401) before the arguments are read, as on HTTP.
    authenticated: bool = True
    # The operation the tool runs, when it is declared at the boundary (registry.operations.boundary):
    # its arguments are decoded and its service called there, every refusal recorded as the operation's.
    operation: Operation | None = None


TOOLS = {
    tool.name: tool
    for tool in (
        Tool(
            name="find_capability",
            title="Find the capability to call now",
            description=(
                "Start here when you need an agent to do something. Describe the task in words (`need`); the "
                "registry answers, best first, the capabilities you may call right now: ones whose scopes your "
                "token holds, whose data regions your token's `regions` allow (and `region`, if you give it), "
                "whose agent has a live instance. Each offer names the capability (`ref`, `agent`, `id`, "
                "`version`, `name`), its `sideEffect` (none < idempotent < write < destructive) and "
                "`requiresApproval`, the least-loaded live `instance` to call (instanceId, url, load), a `score` "
                "in [0, 1] and `why` (relevance to your words, risk, load, slo; each in [0, 1], higher is "
                "better). Prefer the first offer unless its side effect is more than the task needs; pass "
                "sideEffectMax 'none' for read-only work. `excluded` counts capabilities you can see that were "
                "left out, by reason: scope, region, unhealthy. Next: get_capability for the chosen ref's "
                "input schema, then request_ticket. Needs a bearer token with registry:read; each offer is audited."
            ),
            arguments=FindArguments,
            run=find_capability,
            annotations={"readOnlyHint": True, "openWorldHint": False},
            operation=OFFERS,
        ),
        Tool(
            name="search_capabilities",
            title="Search capabilities",
            description=(
                "Find capabilities (skills of registered AI agents) by words, tags, data region and the most "
                "dangerous side effect you accept. Returns public metadata only: ref, name, description, tags, "
                "required scopes, sideEffect, requiresApproval, dataRegions, status and health; never input or "
                "output schemas or endpoints. Side-effect levels, from harmless to dangerous: none < idempotent < "
                "write < destructive (none: only reads; idempotent: writes, repeating is harmless; write: changes "
                "state; destructive: deletes or cannot be undone); sideEffectMax 'none' finds read-only "
                "capabilities. Works without a token "
                "(public capabilities); a token with registry:read adds your tenant's and shared ones. Page "
                "with `cursor` = the previous result's `nextCursor` (null: no more). To call a capability, get "
                "its schemas with get_capability: they come only from there."
            ),
            arguments=SearchArguments,
            run=search_capabilities,
            annotations={"readOnlyHint": True, "openWorldHint": False},
            authenticated=False,
        ),
        Tool(
            name="get_capability",
            title="Get a capability's schemas and endpoints",
            description=(
                "The full detail of one capability version: inputSchema (the arguments it takes), outputSchema, "
                "examples and endpoints (the agent's interfaces and live instances), with its public fields. "
                "This is the only place schemas come from. Needs a bearer token that holds every scope in the "
                "capability's `scopes` and, when it declares dataRegions, a `regions` claim including one of "
                "them; otherwise the result is an error with code not_found, retired, insufficient_scope (with "
                "missingScopes) or data_location_denied. Every release and refusal is audited."
            ),
            arguments=CapabilityArguments,
            run=get_capability,
            operation=DETAIL,
            annotations={"readOnlyHint": True, "openWorldHint": False},
        ),
        Tool(
            name="get_tool_definition",
            title="Get a capability as a tool definition",
            description=(
                "The capability as a ready-made tool definition to give a model: format 'mcp' (an MCP tool: "
                "name, description, inputSchema, annotations derived from its side effect) or 'openai' (a "
                "function-calling tool). Same token requirements and audit as get_capability."
            ),
            arguments=ToolDefinitionArguments,
            run=get_tool_definition,
            operation=DETAIL,
            annotations={"readOnlyHint": True, "openWorldHint": False},
        ),
        Tool(
            name="request_ticket",
            title="Request a delegation ticket",
            description=(
                "Obtain a signed, short-lived delegation ticket (a JWT) that lets you call the capability's agent "
                "with the given scopes, to send to it as its bearer token. Ask only for the scopes the call needs: "
                "they must be among the capability's `scopes` and your token's, otherwise the result is an error "
                "with code delegation_denied (reason scope_escalation). Returns {ticket, jti, expiresAt, scopes, "
                "resources, ref, depth, maxDepth}. For capabilities with requiresApproval (destructive ones by "
                "default) no ticket is issued yet: the result says the approval is pending and gives its "
                "approvalId. Needs a bearer token. Every grant and refusal is audited."
            ),
            arguments=TicketArguments,
            run=request_ticket_tool,
            operation=MINT,
            annotations={
                "readOnlyHint": False,
                "destructiveHint": False,
                "idempotentHint": False,
                "openWorldHint": False,
            },
        ),
    )
}


def _input_schema(arguments: type) -> dict[str, Any]:
    """The JSON Schema of a tool's arguments, the Struct's own definition at the top level."""
    schema = msgspec.json.schema(arguments)
    defs = schema.pop("$defs", {})
    top = defs.pop(arguments.__name__)
    top.pop("title", None)
    for prop in top["properties"].values():
        # msgspec puts an optional field's description inside its anyOf; models read it at the top.
        for alternative in prop.get("anyOf", ()):
            if "description" in alternative:
                prop.setdefault("description", alternative.pop("description"))
    if defs:
        top["$defs"] = defs
    top["additionalProperties"] = False
    return top


TOOL_LIST = [
    {
        "name": t.name,
        "title": t.title,
        "description": t.description,
        "inputSchema": _input_schema(t.arguments),
        "annotations": t.annotations,
    }
    for t in TOOLS.values()
]


def _tool_result(body: dict[str, Any], *, is_error: bool, note: str | None = None) -> dict[str, Any]:
    # Structured content for programs, the same JSON as text for clients that only show text.
    content = [{"type": "text", "text": msgspec.json.encode(body).decode()}]
    if note:
        content.insert(0, {"type": "text", "text": note})
    return {"content": content, "structuredContent": body, "isError": is_error}


async def call_tool(call: Call, tool: Tool, arguments: dict[str, Any]) -> dict[str, Any]:
    """Run a tool; refusals and unfit arguments become `isError` results carrying the problem body."""
    try:
        if tool.authenticated and call.caller is None:
            call.registry.auth_failures["missing"] += 1  # counted like a 401 of the JSON API, not audited
            raise invalid_token(
                "this tool needs a bearer token: send 'Authorization: Bearer <token>' on the MCP requests"
            )
        if unstorable_pointer(arguments) is not None:
            error = invalid_request(
                "arguments must not contain NUL characters", [ErrorItem(path="", message="NUL character")]
            )
            # as on the JSON API: `request.refused`, never the tool's own event
            raise await record_refusal(
                call.registry,
                call.caller,
                error.about(tenant=None, ref=f"POST /mcp {tool.name}"),
                event_type=REFUSED,
                reason="invalid_request: NUL",
                trace_id=call.trace_id,
            )

        async def step() -> ToolResult:
            try:
                args: Any = msgspec.convert(arguments, tool.arguments)
            except msgspec.ValidationError as exc:
                raise invalid_request(
                    f"the arguments do not fit {tool.name}'s input schema", [decode_error_item(exc, tool.arguments)]
                ) from None
            return await tool.run(call, args)

        if tool.operation is not None:
            door = RefusalSubject(ref=f"POST /mcp {tool.name}")
            result = await run(call.registry, tool.operation, call.caller, step, trace_id=call.trace_id, door=door)
        else:
            result = await step()
    except ProblemError as error:
        return _tool_result(msgspec.to_builtins(problem_of(error, call.trace_id)), is_error=True)
    except asyncpg.DataError as exc:  # a value no check above caught: still the caller's own 400
        unacceptable = unacceptable_value(exc, "an argument value")
        return _tool_result(msgspec.to_builtins(problem_of(unacceptable, call.trace_id)), is_error=True)
    return _tool_result(result.body, is_error=False, note=result.note)
