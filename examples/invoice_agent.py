"""An invoice agent built with a2a-sdk whose releases are gated by behaviour fixtures
(docs/api.md#the-replay-gate, README "Releasing a version with fixtures").

v1.1 looks invoices up. v1.2 "also marks the invoice as viewed": every schema is unchanged, so the
compatibility check lets it through, but it now writes, and says so (`capreg.sideEffect: write`);
the baseline's fixtures expect no side effect, so its replay fails and it stays a candidate.

    # the registration body of a release (the fixtures travel with every version)
    python examples/invoice_agent.py --registration 1.1.0 > body.json
    # serve a release's behaviour on AGENT_HOST:AGENT_PORT (default 127.0.0.1:9002), A2A JSON-RPC at /a2a
    INVOICE_AGENT_BEHAVIOUR=1.2 python examples/invoice_agent.py
    # a publisher's CI: run the baseline's fixtures against the candidate, exit 0 passed / 1 failed
    CAPREG_URL=... CAPREG_TOKEN=<registry:attest registry:read invoice:read> \\
        capreg replay acme/invoice-agent/invoice.lookup@1.2.0 --instance-url http://127.0.0.1:9002/a2a

Each answer reports what the call did: the task state (completed, or failed with metadata
`capreg.errorCode`) and metadata `capreg.sideEffect`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

import uvicorn
from a2a.helpers.proto_helpers import get_data_parts, new_data_message, new_task
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, TaskState
from starlette.applications import Starlette

AGENT_ID = "invoice-agent"
SKILL_ID = "invoice.lookup"
HOST = os.environ.get("AGENT_HOST", "127.0.0.1")
PORT = int(os.environ.get("AGENT_PORT", "9002"))
BEHAVIOUR = os.environ.get("INVOICE_AGENT_BEHAVIOUR", "1.1")
ENDPOINT = f"http://{HOST}:{PORT}/a2a"

INVOICES = {"inv-2026-091": {"invoiceId": "inv-2026-091", "status": "open", "totalCents": 129900, "currency": "EUR"}}

INPUT_SCHEMA = {
    "type": "object",
    "properties": {"invoiceId": {"type": "string"}},
    "required": ["invoiceId"],
    "additionalProperties": False,
}
OUTPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "invoiceId": {"type": "string"},
        "status": {"type": "string"},
        "totalCents": {"type": "integer"},
        "currency": {"type": "string"},
    },
    "required": ["invoiceId", "status"],
}
# What every release must keep doing: old callers, old data, and the failure answer.
FIXTURES = [
    {
        "name": "open-invoice",
        "input": {"invoiceId": "inv-2026-091"},
        "expect": {"outcome": "ok", "output": {"invoiceId": "inv-2026-091", "status": "open"}, "sideEffect": "none"},
    },
    {
        "name": "unknown-invoice",
        "input": {"invoiceId": "inv-0000-000"},
        "expect": {"outcome": "not_found", "sideEffect": "none"},
    },
]


def registration(version: str, *, url: str = ENDPOINT) -> dict[str, Any]:
    """The PUT body publishing `version` of invoice.lookup (schemas and fixtures the same in each)."""
    return {
        "name": "Invoice Agent",
        "description": "Looks up invoices.",
        "version": version,
        "supportedInterfaces": [{"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "defaultInputModes": ["application/json"],
        "defaultOutputModes": ["application/json"],
        "visibility": "public",
        "skills": [
            {
                "id": SKILL_ID,
                "name": "Look up an invoice",
                "description": "Returns one invoice and its status.",
                "tags": ["finance", "invoice"],
                "version": version,
                "sideEffect": "write",
                "requiresApproval": False,
                "scopes": ["invoice:read"],
                "inputSchema": INPUT_SCHEMA,
                "outputSchema": OUTPUT_SCHEMA,
                "fixtures": FIXTURES,
            }
        ],
    }


CARD = AgentCard(
    name="Invoice Agent",
    description="Looks up invoices.",
    version=f"{BEHAVIOUR}.0",
    supported_interfaces=[AgentInterface(url=ENDPOINT, protocol_binding="JSONRPC", protocol_version="1.0")],
    capabilities=AgentCapabilities(streaming=False),
    default_input_modes=["application/json"],
    default_output_modes=["application/json"],
    skills=[
        AgentSkill(
            id=SKILL_ID,
            name="Look up an invoice",
            description="Returns one invoice and its status.",
            tags=["finance", "invoice"],
        )
    ],
)


class InvoiceExecutor(AgentExecutor):
    """Answers a lookup as a task: completed with the invoice, or failed with `capreg.errorCode`."""

    def __init__(self, behaviour: str):
        self.behaviour = behaviour
        self.viewed: set[str] = set()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        await event_queue.enqueue_event(new_task(context.task_id, context.context_id, TaskState.TASK_STATE_WORKING))
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        arguments = next(iter(get_data_parts(context.message.parts)), {}) if context.message else {}
        invoice = INVOICES.get(arguments.get("invoiceId")) if isinstance(arguments, dict) else None
        side_effect = "none"
        if invoice is not None and self.behaviour == "1.2":
            self.viewed.add(invoice["invoiceId"])  # v1.2 also marks the invoice as viewed
            side_effect = "write"
        answer = new_data_message(
            invoice or {"error": "no such invoice"}, context_id=context.context_id, task_id=context.task_id
        )
        answer.metadata.update({"capreg.sideEffect": side_effect})
        if invoice is None:
            answer.metadata.update({"capreg.errorCode": "not_found"})
            await updater.failed(answer)
        else:
            await updater.complete(answer)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError("lookups are not cancellable")


def create_app() -> Starlette:
    handler = DefaultRequestHandler(
        agent_executor=InvoiceExecutor(BEHAVIOUR), task_store=InMemoryTaskStore(), agent_card=CARD
    )
    return Starlette(routes=create_agent_card_routes(CARD) + create_jsonrpc_routes(handler, "/a2a"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="the invoice agent (serves, or prints a registration body)")
    parser.add_argument("--registration", metavar="VERSION", help="print the PUT body publishing VERSION and exit")
    parser.add_argument("--url", default=ENDPOINT, help="the A2A endpoint named in the registration")
    args = parser.parse_args()
    if args.registration:
        print(json.dumps(registration(args.registration, url=args.url), indent=2))
        sys.exit(0)
    print(f"invoice agent {BEHAVIOUR} serving on {ENDPOINT}", flush=True)
    uvicorn.run(create_app(), host=HOST, port=PORT, log_level="warning")
