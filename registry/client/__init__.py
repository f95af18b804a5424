"""The Python client of capreg: Registry (blocking) and AsyncRegistry (asyncio) with the same
methods, CapregError, TicketVerifier for agents, and typed results. See docs/client.md.

It imports no server code (no litestar, asyncpg or granian), so agents and routers can use it alone.
"""

from registry.client.aio import AsyncKeepAlive, AsyncRegistry
from registry.client.base import KeepAliveState, ToolList
from registry.client.calls import CapabilityRef, parse_ref
from registry.client.errors import CapregError, ErrorDetail
from registry.client.results import (
    Agent,
    Approval,
    AuditEvent,
    Capability,
    CapabilityDetail,
    Checkpoint,
    Endpoints,
    Excluded,
    Grant,
    Heartbeat,
    Instance,
    Interface,
    Introspection,
    Offer,
    OfferInstance,
    Offers,
    OfferWhy,
    Registration,
    ReplayVerdict,
    Revocation,
    Ticket,
    TicketClaims,
    Withdrawal,
)
from registry.client.sync import KeepAlive, Registry
from registry.client.verifier import TicketVerifier

__all__ = [
    "Agent",
    "Approval",
    "AsyncKeepAlive",
    "AsyncRegistry",
    "AuditEvent",
    "Capability",
    "CapabilityDetail",
    "CapabilityRef",
    "CapregError",
    "Checkpoint",
    "Endpoints",
    "ErrorDetail",
    "Grant",
    "Heartbeat",
    "Instance",
    "Interface",
    "Introspection",
    "KeepAlive",
    "KeepAliveState",
    "Excluded",
    "Offer",
    "OfferInstance",
    "Offers",
    "OfferWhy",
    "Registration",
    "Registry",
    "ReplayVerdict",
    "Revocation",
    "Withdrawal",
    "Ticket",
    "TicketClaims",
    "TicketVerifier",
    "ToolList",
    "parse_ref",
]
