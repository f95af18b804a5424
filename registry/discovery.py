"""Discovery: public capability views, query parameters, cursors and ETags.

Public views are built from rows that never contain schemas, examples or endpoints, so nothing
gated can leak through discovery by construction.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Literal

import asyncpg
import msgspec

from registry.problems import ErrorItem, invalid_request
from registry.records import SIDE_EFFECT_ORDER, CapabilityVersion, PublicCapability, Slo
from registry.wire import Wire

MAX_LIMIT = 200


class DiscoveryPage(Wire):
    items: list[PublicCapability]
    next_cursor: str | None


class AgentView(Wire):
    """The agent public view (contract section 2)."""

    tenant: str
    agent_id: str
    name: str
    description: str
    version: str
    provider: dict | None
    visibility: Literal["public", "tenant"]
    health: Literal["healthy", "stale", "unknown"]
    # Unexpired instance leases (heartbeats).
    live_instances: int
    skills: list[PublicCapability]
    updated_at: object


def capability_ref(tenant: str, agent_id: str, skill_id: str, version: str) -> str:
    return f"{tenant}/{agent_id}/{skill_id}@{version}"


def _version_fields(row: asyncpg.Record) -> dict:
    """The fields every view of a capability version shares, from its row."""
    slo = row["slo"]
    return {
        "tenant": row["tenant"],
        "agent_id": row["agent_id"],
        "id": row["skill_id"],
        "version": row["version"],
        "name": row["name"],
        "description": row["description"],
        "tags": list(row["tags"]),
        "scopes": list(row["scopes"]),
        "side_effect": row["side_effect"],
        "requires_approval": row["requires_approval"],
        "data_regions": list(row["data_regions"]),
        "slo": msgspec.convert(slo, Slo) if slo is not None else None,
        "status": row["status"],
        "sunset_at": row["sunset_at"],
        "effective_at": row["effective_at"],
    }


def public_capability(row: asyncpg.Record) -> PublicCapability:
    return PublicCapability(
        ref=capability_ref(row["tenant"], row["agent_id"], row["skill_id"], row["version"]),
        health=row["health"],
        live_instances=row["live_instances"],
        updated_at=row["updated_at"],
        **_version_fields(row),
    )


def agent_view(agent: asyncpg.Record, skills: list[asyncpg.Record]) -> AgentView:
    return AgentView(
        tenant=agent["tenant"],
        agent_id=agent["agent_id"],
        name=agent["name"],
        description=agent["description"],
        version=agent["version"],
        provider=agent["provider"],
        visibility=agent["visibility"],
        health=agent["health"],
        live_instances=agent["live_instances"],
        skills=[public_capability(row) for row in skills],
        updated_at=agent["updated_at"],
    )


def encode_cursor(row: asyncpg.Record) -> str:
    key = [row["tenant"], row["agent_id"], row["skill_id"], row["version_key"]]
    return base64.urlsafe_b64encode(msgspec.json.encode(key)).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[str, str, str, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        key = msgspec.json.decode(raw, type=tuple[str, str, str, str])
    except (ValueError, msgspec.DecodeError):
        raise invalid_request("cursor is not one this registry issued", [ErrorItem(path="cursor", message="invalid cursor")]) from None
    return key


def side_effect_rank(value: str | None) -> int | None:
    if value is None:
        return None
    if value not in SIDE_EFFECT_ORDER:
        raise invalid_request(
            "unknown sideEffectMax",
            [ErrorItem(path="sideEffectMax", message=f"must be one of {', '.join(SIDE_EFFECT_ORDER)}")],
        )
    return SIDE_EFFECT_ORDER[value]


def etag_for(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """RFC 9110 weak comparison of an If-None-Match list against our strong ETag."""
    if not if_none_match:
        return False
    for candidate in if_none_match.split(","):
        candidate = candidate.strip()
        if candidate == "*" or candidate.removeprefix("W/") == etag:
            return True
    return False


def capability_version(row: asyncpg.Record) -> CapabilityVersion:
    """A full capability version (schemas included) from a row selected with DETAIL_COLUMNS."""
    return CapabilityVersion(
        examples=list(row["examples"]),
        input_schema=row["input_schema"],
        output_schema=row["output_schema"],
        input_modes=list(row["input_modes"]),
        output_modes=list(row["output_modes"]),
        deprecation_message=row["deprecation_message"],
        published_at=row["published_at"],
        **_version_fields(row),
    )
