"""A router: discovers a read-only invoice capability, offers it to an LLM as an OpenAI tool, and
when the model calls it, mints a capreg ticket and calls the agent through the a2a-sdk client.

    CAPREG_URL=http://127.0.0.1:8080 CAPREG_TOKEN=$(capreg token mint --tenant acme --sub router \
        --scope "registry:read invoice:read" --regions eu) python examples/router.py

Prints one JSON line per step (tools, call, answer). No LLM is called: the model's choice is
simulated as the first tool with {"invoiceId": "inv-2026-091"}.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.auth import AuthInterceptor
from a2a.helpers.proto_helpers import get_data_parts, new_data_message
from a2a.types import Role, SendMessageRequest

from registry.client import AsyncRegistry, CapregError
from registry.client.a2a import TicketCredentials

REGISTRY = os.environ.get("CAPREG_URL", "http://127.0.0.1:8080")


def show(step: str, value) -> None:
    print(json.dumps({"step": step, "value": value}), flush=True)


async def main() -> int:
    async with AsyncRegistry(REGISTRY, token=os.environ["CAPREG_TOKEN"]) as registry:
        # 1. Discover: invoice capabilities without side effects, of agents with a live instance.
        found = [
            c
            async for c in registry.discover(
                tag="invoice", side_effect_max="none", health="healthy", tenant=os.environ.get("CAPREG_TENANT")
            )
        ]
        if not found:
            show("error", "no healthy read-only invoice capability")
            return 1
        refs = [f"{c.tenant}/{c.agent_id}/{c.id}@{c.version}" for c in found]
        # 2. The tool list for the LLM (tools=... of the OpenAI API); refs maps a tool name back.
        tools = await registry.tools(refs, format="openai")
        show("tools", list(tools))
        name, arguments = tools[0]["function"]["name"], {"invoiceId": "inv-2026-091"}  # what the model would pick
        ref = tools.refs[name]
        show("call", {"tool": name, "ref": ref, "arguments": arguments})

        # 3. Where to call it, and the agent's own card (it declares the bearer scheme).
        detail = await registry.detail(ref)
        endpoint = detail.urls()[0]
        origin = "{0.scheme}://{0.netloc}".format(urlsplit(endpoint))
        credentials = TicketCredentials(
            registry,
            ref,
            scopes=detail.scopes,
            ttl=120,
            on_behalf_of="user-19",
            resources=[f"invoice:{arguments['invoiceId']}"],
        )
        async with httpx.AsyncClient(timeout=10) as http:
            card = await A2ACardResolver(http, base_url=origin).get_agent_card()
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(
                card, interceptors=[AuthInterceptor(credentials)]
            )
            request = SendMessageRequest(message=new_data_message(arguments, role=Role.ROLE_USER))
            async for response in client.send_message(request):
                if response.HasField("message"):
                    show("answer", get_data_parts(response.message.parts)[0])
        show("ticket", {"jti": credentials.ticket.jti, "ref": credentials.ticket.ref})
    return 0


if __name__ == "__main__":
    try:
        sys.exit(asyncio.run(main()))
    except CapregError as error:
        print(f"router: {error}", file=sys.stderr)
        sys.exit(1)
