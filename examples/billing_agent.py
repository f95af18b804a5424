"""A billing agent built with a2a-sdk that registers with capreg at startup, keeps its lease alive
while it runs, and serves only callers presenting a capreg ticket for it.

    CAPREG_URL=http://127.0.0.1:8080 CAPREG_TOKEN=$(capreg token mint --tenant acme --sub billing-agent \
        --scope registry:publish) python examples/billing_agent.py

Environment: CAPREG_URL, CAPREG_TOKEN (a token of this agent with registry:publish), CAPREG_TENANT
(default acme), AGENT_ID (default billing-agent-example), AGENT_HOST / AGENT_PORT (default
127.0.0.1:9001), CAPREG_ISSUER (default capreg).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

import uvicorn
from a2a.helpers.proto_helpers import get_data_parts, new_data_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from starlette.applications import Starlette

from registry.client import AsyncRegistry, TicketVerifier
from registry.client.a2a import TicketAuthBackend, ticket_claims

TENANT = os.environ.get("CAPREG_TENANT", "acme")
# Not the README walkthrough's acme/billing-agent: this agent's card differs, and registering it
# under that id would replace the walkthrough's card.
AGENT_ID = os.environ.get("AGENT_ID", "billing-agent-example")
HOST = os.environ.get("AGENT_HOST", "127.0.0.1")
PORT = int(os.environ.get("AGENT_PORT", "9001"))
REGISTRY = os.environ.get("CAPREG_URL", "http://127.0.0.1:8080")
ENDPOINT = f"http://{HOST}:{PORT}/a2a"

INVOICES = {"inv-2026-091": {"invoiceId": "inv-2026-091", "status": "open", "totalCents": 129900, "currency": "EUR"}}

CARD = AgentCard(
    name="Billing Agent",
    description="Looks up invoices for the finance team.",
    version="1.0.0",
    supported_interfaces=[AgentInterface(url=ENDPOINT, protocol_binding="JSONRPC", protocol_version="1.0")],
    capabilities=AgentCapabilities(streaming=False),
    default_input_modes=["application/json"],
    default_output_modes=["application/json"],
    skills=[
        AgentSkill(
            id="invoice.lookup",
            name="Look up an invoice",
            description="Returns one invoice and its status.",
            tags=["finance", "invoice"],
            examples=["look up invoice inv-2026-091"],
        )
    ],
    # The a2a-sdk client sends credentials only for schemes the card declares and requires.
    security_schemes={
        "capreg": SecurityScheme(
            http_auth_security_scheme=HTTPAuthSecurityScheme(
                scheme="bearer", bearer_format="JWT", description="a capreg delegation ticket for this agent"
            )
        )
    },
    security_requirements=[SecurityRequirement(schemes={"capreg": StringList()})],
)

# What capreg needs beyond the A2A card: per-skill version, side effect, scopes and schemas.
SKILL_FIELDS = {
    "invoice.lookup": {
        "version": "1.0.0",
        "sideEffect": "none",
        "scopes": ["invoice:read"],
        "inputSchema": {
            "type": "object",
            "properties": {"invoiceId": {"type": "string"}},
            "required": ["invoiceId"],
            "additionalProperties": False,
        },
        "outputSchema": {
            "type": "object",
            "properties": {
                "invoiceId": {"type": "string"},
                "status": {"type": "string"},
                "totalCents": {"type": "integer"},
            },
        },
    }
}


class BillingExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        claims = ticket_claims(context)  # verified by TicketAuthBackend before this runs
        arguments = next(iter(get_data_parts(context.message.parts)), {}) if context.message else {}
        invoice_id = arguments.get("invoiceId") if isinstance(arguments, dict) else None
        allowed = not claims.resources or f"invoice:{invoice_id}" in claims.resources
        invoice = INVOICES.get(invoice_id) if allowed else None
        answer = {"invoice": invoice, "onBehalfOf": claims.sub, "calledBy": claims.caller, "ticket": claims.jti}
        if invoice is None:
            answer["error"] = "no such invoice" if allowed else "the ticket does not cover this invoice"
        await event_queue.enqueue_event(
            new_data_message(answer, context_id=context.context_id, task_id=context.task_id)
        )

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError("lookups are not cancellable")


@contextlib.asynccontextmanager
async def lifespan(app: Starlette):
    registry = AsyncRegistry(REGISTRY, token=os.environ["CAPREG_TOKEN"])
    try:
        await registry.register(TENANT, AGENT_ID, CARD, skill_fields=SKILL_FIELDS, visibility="public")
        async with registry.keep_alive(TENANT, AGENT_ID, f"{socket.gethostname()}-{PORT}", url=ENDPOINT, ttl=30):
            print(f"billing agent serving on {ENDPOINT}, registered as {TENANT}/{AGENT_ID}", flush=True)
            yield
    finally:
        await registry.aclose()


def create_app() -> Starlette:
    verifier = TicketVerifier(
        REGISTRY, audience=f"{TENANT}/{AGENT_ID}", issuer=os.environ.get("CAPREG_ISSUER", "capreg")
    )
    handler = DefaultRequestHandler(agent_executor=BillingExecutor(), task_store=InMemoryTaskStore(), agent_card=CARD)
    routes = create_agent_card_routes(CARD) + create_jsonrpc_routes(handler, "/a2a")
    backend = TicketAuthBackend(verifier, scope="invoice:read", skill="invoice.lookup")
    return Starlette(routes=routes, middleware=[backend.middleware()], lifespan=lifespan)


if __name__ == "__main__":
    uvicorn.run(create_app(), host=HOST, port=PORT, log_level="warning")
