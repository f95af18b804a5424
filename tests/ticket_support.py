"""Support for the ticket, approval and key rotation tests: agents to delegate to, ticket requests,
traced requests (to find a request's audit event by its trace id), and offline verification."""

from __future__ import annotations

import ast
import re
import secrets
from pathlib import Path

import jwt

from tests.audit_support import ONE_ROW_PER_EVENT
from tests.conftest import example

README = Path(__file__).parent.parent / "README.md"


def skill(skill_id: str, version: str, scopes: list[str], **fields) -> dict:
    return {
        "id": skill_id,
        "name": skill_id,
        "description": f"{skill_id} for tests",
        "version": version,
        "scopes": scopes,
        "sideEffect": "none",
        **fields,
    }


def card(skills: list[dict], *, visibility: str = "tenant", shared_with: list[str] | None = None) -> dict:
    base = example("billing-agent.json")
    return {**base, "visibility": visibility, "sharedWith": shared_with or [], "skills": skills}


async def register(client, mint, tenant: str, agent_id: str, skills: list[dict], **card_fields) -> None:
    response = await client.put(
        f"/v1/agents/{tenant}/{agent_id}",
        json=card(skills, **card_fields),
        headers=mint(tenant, agent_id, "registry:publish"),
    )
    assert response.status_code in (200, 201), response.text


async def register_finance(client, mint, tenant: str) -> None:
    """billing-agent (invoice lookups), ledger-agent (reads, and reversals that need approval)."""
    await register(
        client,
        mint,
        tenant,
        "billing-agent",
        [
            skill("invoice.lookup", "2.0.0", ["invoice:read", "invoice:list"]),
            skill("invoice.mark-paid", "1.1.0", ["invoice:write"], sideEffect="idempotent"),
        ],
    )
    await register(
        client,
        mint,
        tenant,
        "ledger-agent",
        [
            skill("ledger.read", "1.0.0", ["invoice:read", "ledger:read"]),
            skill("ledger.reverse-entry", "1.0.0", ["ledger:write"], sideEffect="destructive"),
        ],
    )


def ticket_body(tenant: str, agent_id: str = "billing-agent", skill_id: str = "invoice.lookup", **fields) -> dict:
    body = {
        "audience": f"{tenant}/{agent_id}",
        "skill": skill_id,
        "version": "^2" if skill_id == "invoice.lookup" else "latest",
        "scopes": ["invoice:read"],
        "ttlSeconds": 300,
    }
    body.update(fields)
    return body


def traced(headers: dict | None = None) -> tuple[dict, str]:
    """Headers with a fresh W3C traceparent, and its trace id (audit events carry it)."""
    trace_id = secrets.token_hex(16)
    return {**(headers or {}), "traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"}, trace_id


async def events_of(db, trace_id: str) -> list[dict]:
    rows = await db.fetch(
        "SELECT type, outcome, reason, tenant, actor_tenant, actor, on_behalf_of, ref, scopes FROM audit_events "
        "WHERE trace_id = $1 AND " + ONE_ROW_PER_EVENT + " ORDER BY seq",
        trace_id,
    )
    return [dict(r) for r in rows]


def readme_python(marker: str) -> str:
    """The README's ```python block containing `marker` (so tests run what the README shows)."""
    for block in re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL):
        if marker in block:
            return block
    raise AssertionError(f"no python block with {marker!r} in README.md")


def offline_checker():
    """`check_ticket(ticket, jwks, me)` exactly as the README defines it."""
    namespace: dict = {}
    # the block's imports and definitions only: its last lines call the function on the walkthrough's $TICKET
    module = ast.parse(readme_python("def check_ticket"), "README.md")
    module.body = [node for node in module.body if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef))]
    exec(compile(module, "README.md", "exec"), namespace)  # noqa: S102
    return namespace["check_ticket"]


def unverified(ticket: str) -> tuple[dict, dict]:
    return jwt.get_unverified_header(ticket), jwt.decode(ticket, options={"verify_signature": False})
