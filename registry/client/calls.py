"""What both clients send and how they read the answers: request building, answer parsing, retry
timing, ETag caching and card bodies. No I/O here; registry.client.sync and registry.client.aio
only move these calls over httpx.Client or httpx.AsyncClient.
"""

from __future__ import annotations

import email.utils
import json
import os
import random
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import msgspec

from registry.client.errors import CapregError, error_from_answer
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

RETRIED_STATUSES = frozenset({429, 503})
USER_AGENT = "capreg-client/0.1"


@dataclass(frozen=True)
class CapabilityRef:
    """`tenant/agentId/skill@version` (version: exact, a range, or `latest` when left out)."""

    tenant: str
    agent_id: str
    skill: str
    version: str = "latest"

    @property
    def audience(self) -> str:
        return f"{self.tenant}/{self.agent_id}"

    @property
    def path(self) -> str:
        return (
            f"/v1/agents/{_seg(self.tenant)}/{_seg(self.agent_id)}/skills/{_seg(self.skill)}"
            f"/versions/{_seg(self.version)}"
        )

    def __str__(self) -> str:
        return f"{self.tenant}/{self.agent_id}/{self.skill}@{self.version}"


def parse_ref(ref: str | CapabilityRef | Capability) -> CapabilityRef:
    if isinstance(ref, CapabilityRef):
        return ref
    if isinstance(ref, Capability):
        return CapabilityRef(ref.tenant, ref.agent_id, ref.id, ref.version)
    if not isinstance(ref, str):
        raise TypeError(
            f"a capability ref is a string like 'acme/billing-agent/invoice.lookup@^2', not {type(ref).__name__}"
        )
    path, at, version = ref.partition("@")
    parts = path.split("/")
    if len(parts) != 3 or not all(parts) or (at and not version):
        raise CapregError(
            f"{ref!r} is not a capability ref (tenant/agentId/skill@version)",
            code="invalid_ref",
        )
    return CapabilityRef(parts[0], parts[1], parts[2], version or "latest")


def _seg(text: str) -> str:
    return quote(text, safe="")


def agent_path(tenant: str, agent_id: str) -> str:
    return f"/v1/agents/{_seg(tenant)}/{_seg(agent_id)}"


@dataclass
class Call:
    """One HTTP exchange: what to send and how to read a 2xx answer (`read(status, body)`)."""

    method: str
    path: str
    read: Callable[[int, bytes], Any]
    params: list[tuple[str, str]] = field(default_factory=list)
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    cacheable: bool = False  # GET answered with an ETag: revalidate with If-None-Match

    def with_param(self, name: str, value: str) -> Call:
        return replace(self, params=[(k, v) for k, v in self.params if k != name] + [(name, value)])


T = TypeVar("T")
_encoder = msgspec.json.Encoder()


def _json(value: Any) -> bytes:
    return _encoder.encode(value)


def _decoding(type_: type[T]) -> Callable[[int, bytes], T]:
    decoder = msgspec.json.Decoder(type_)
    return lambda status, body: decoder.decode(body)


def _params(**values: Any) -> list[tuple[str, str]]:
    """Query parameters, leaving out None; lists repeat the name; booleans as true/false."""
    out: list[tuple[str, str]] = []
    for name, value in values.items():
        if value is None:
            continue
        for item in value if isinstance(value, list | tuple) else [value]:
            out.append((name, ("true" if item else "false") if isinstance(item, bool) else str(item)))
    return out


# ---------------------------------------------------------------------------
# Cards


def card_body(
    card: Any, fields: Mapping[str, Any] | None = None, skill_fields: Mapping[str, Mapping[str, Any]] | None = None
) -> bytes:
    """The PUT body from a dict, a path to a JSON file, raw JSON bytes, or an a2a-sdk AgentCard;
    `fields` adds registry fields at the top (visibility, sharedWith), `skill_fields` per skill id
    (version, sideEffect, scopes, inputSchema, ...)."""
    if not fields and not skill_fields:
        # Sent as written: the registry judges it and names each problem's path.
        if isinstance(card, bytes | bytearray):
            return bytes(card)
        if isinstance(card, str | os.PathLike):
            return _read_card(card)
    document = _card_document(card)
    document.update(fields or {})
    if skill_fields:
        unknown = set(skill_fields) - {skill.get("id") for skill in document.get("skills", [])}
        if unknown:
            raise CapregError(
                f"skill_fields names skills the card does not have: {sorted(unknown)}", code="invalid_card"
            )
        document["skills"] = [
            {**skill, **skill_fields.get(skill.get("id"), {})} for skill in document.get("skills", [])
        ]
    return _json(document)


def _read_card(path: str | os.PathLike) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise CapregError(f"cannot read card file {os.fspath(path)}: {exc.strerror}", code="invalid_card") from None


def _card_document(card: Any) -> dict[str, Any]:
    if isinstance(card, Mapping):
        return dict(card)
    if isinstance(card, str | os.PathLike):
        return _card_document(_read_card(card))
    if isinstance(card, bytes | bytearray):
        try:
            document = json.loads(card)
        except ValueError as exc:
            raise CapregError(f"the card is not JSON: {exc}", code="invalid_card") from None
        if not isinstance(document, dict):
            raise CapregError("the card is not a JSON object", code="invalid_card")
        return document
    if hasattr(card, "DESCRIPTOR"):  # an a2a-sdk AgentCard (a protobuf message)
        from google.protobuf.json_format import MessageToDict

        return MessageToDict(card)
    raise CapregError(
        f"cannot register a {type(card).__name__}: give a dict, a JSON file path or an a2a-sdk AgentCard",
        code="invalid_card",
    )


def camel_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """shared_with=[...] -> sharedWith: registry fields may be given in Python spelling."""
    out = {}
    for name, value in fields.items():
        head, *rest = name.split("_")
        out[head + "".join(part[:1].upper() + part[1:] for part in rest)] = value
    return out


def time_param(value: Any) -> str | None:
    return value.isoformat() if hasattr(value, "isoformat") else value


# ---------------------------------------------------------------------------
# Calls


def register(tenant: str, agent_id: str, body: bytes) -> Call:
    def read(status: int, raw: bytes) -> Registration:
        result = msgspec.json.decode(raw, type=Registration)
        result.created = status == 201
        return result

    return Call("PUT", agent_path(tenant, agent_id), read, body=body, headers={"Content-Type": "application/json"})


def withdraw(tenant: str, agent_id: str) -> Call:
    return Call("DELETE", agent_path(tenant, agent_id), _decoding(Withdrawal))


def heartbeat(tenant: str, agent_id: str, instance_id: str, url: str | None, ttl: int, load: float | None) -> Call:
    body: dict[str, Any] = {"instanceId": instance_id, "ttlSeconds": int(ttl)}
    if url is not None:
        body["url"] = url
    if load is not None:
        body["load"] = min(1.0, max(0.0, float(load)))
    return Call(
        "POST",
        agent_path(tenant, agent_id) + "/heartbeat",
        _decoding(Heartbeat),
        body=_json(body),
        headers={"Content-Type": "application/json"},
    )


def agent(tenant: str, agent_id: str) -> Call:
    return Call("GET", agent_path(tenant, agent_id), _decoding(Agent))


def agent_of_ref(ref: str) -> tuple[str, str]:
    """(tenant, agentId) of "tenant/agentId" or of a capability ref "tenant/agentId/skill@version"."""
    if not isinstance(ref, str):
        raise TypeError(f"an agent ref is a string like 'acme/billing-agent', not {type(ref).__name__}")
    parts = ref.partition("@")[0].split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise CapregError(f"{ref!r} is not an agent ref (tenant/agentId)", code="invalid_ref")
    return parts[0], parts[1]


def agent_card(tenant: str, agent_id: str) -> Call:
    """The agent's public A2A card, as the registry serves it (signed)."""
    return Call(
        "GET", agent_path(tenant, agent_id) + "/.well-known/agent-card.json", lambda status, body: json.loads(body)
    )


def jwks() -> Call:
    return Call("GET", "/.well-known/jwks.json", lambda status, body: json.loads(body))


def discover(**query: Any) -> Call:
    return Call("GET", "/v1/capabilities", _decoding(_CapabilityPage), params=_params(**query), cacheable=True)


def detail(ref: CapabilityRef) -> Call:
    return Call("GET", ref.path, _decoding(CapabilityDetail))


def submit_replay(ref: CapabilityRef, results: list[dict[str, Any]], instance: str | None) -> Call:
    """POST .../replays; a 422 `replay_failed` is a verdict too (`ReplayVerdict`, `failed`), not an error."""
    body: dict[str, Any] = {"results": results}
    if instance is not None:
        body["instance"] = instance
    return Call(
        "POST",
        ref.path + "/replays",
        _decoding(ReplayVerdict),
        body=_json(body),
        headers={"Content-Type": "application/json"},
    )


def failed_verdict(error: CapregError) -> ReplayVerdict | None:
    """The `failed` verdict a 422 `replay_failed` answer carries (None for any other error)."""
    if error.code != "replay_failed":
        return None
    return ReplayVerdict(
        verdict="failed", errors=[{"fixture": e.fixture, "kind": e.kind, "message": e.message} for e in error.errors]
    )


def tool(ref: CapabilityRef, format: str) -> Call:  # noqa: A002
    if format not in ("openai", "mcp"):
        raise CapregError(f"tool format is openai or mcp, not {format!r}", code="invalid_request")
    return Call("GET", ref.path + "/tool", _decoding(dict[str, Any]), params=[("format", format)])


def mint_ticket(
    ref: CapabilityRef,
    *,
    scopes: Iterable[str],
    ttl: int | None,
    on_behalf_of: str | None,
    resources: Iterable[str] | None,
    parent_ticket: str | None,
    max_depth: int,
    idempotency_key: str | None,
) -> Call:
    if isinstance(scopes, str):
        scopes = scopes.split()
    body: dict[str, Any] = {
        "audience": ref.audience,
        "skill": ref.skill,
        "version": ref.version,
        "scopes": list(scopes),
    }
    if ttl is not None:
        body["ttlSeconds"] = ttl
    if resources:
        body["resources"] = list(resources)
    if on_behalf_of is not None:
        body["onBehalfOf"] = on_behalf_of
    if max_depth:
        body["maxDepth"] = max_depth
    if parent_ticket is not None:
        body["parentTicket"] = parent_ticket
    # A key of our own when the caller gave none: a retried request then replays, never mints twice.
    headers = {"Content-Type": "application/json", "Idempotency-Key": idempotency_key or uuid.uuid4().hex}
    ticket_reader, approval_reader = msgspec.json.Decoder(Ticket), msgspec.json.Decoder(Approval)

    def read(status: int, raw: bytes) -> Ticket | Approval:
        return approval_reader.decode(raw) if status == 202 else ticket_reader.decode(raw)

    return Call("POST", "/v1/tickets", read, body=_json(body), headers=headers)


def offers(
    need: str | None,
    *,
    skill: str | None,
    tags: Iterable[str] | None,
    region: str | None,
    side_effect_max: str | None,
    limit: int | None,
    ticket: Mapping[str, Any] | None,
) -> Call:
    """POST /v1/offers. `ticket` as the request's `ticket` object (camelCase keys; `ttl` and
    `on_behalf_of` are accepted too)."""
    body: dict[str, Any] = {}
    for key, value in (
        ("need", need),
        ("skill", skill),
        ("region", region),
        ("sideEffectMax", side_effect_max),
        ("limit", limit),
    ):
        if value is not None:
            body[key] = value
    if tags:
        body["tags"] = [tags] if isinstance(tags, str) else list(tags)
    if ticket is not None:
        names = {
            "ttl": "ttlSeconds",
            "ttl_seconds": "ttlSeconds",
            "on_behalf_of": "onBehalfOf",
            "max_depth": "maxDepth",
        }
        body["ticket"] = {
            names.get(k, k): (v.split() if k == "scopes" and isinstance(v, str) else v) for k, v in ticket.items()
        }
    return Call("POST", "/v1/offers", _decoding(Offers), body=_json(body), headers={"Content-Type": "application/json"})


def approval(approval_id: str) -> Call:
    return Call("GET", f"/v1/approvals/{_seg(approval_id)}", _decoding(Approval))


def introspect(ticket: str) -> Call:
    return Call(
        "POST",
        "/v1/tickets/introspect",
        _decoding(Introspection),
        body=_json({"ticket": ticket}),
        headers={"Content-Type": "application/json"},
    )


def revoke(jti: str) -> Call:
    return Call("POST", f"/v1/tickets/{_seg(jti)}/revoke", _decoding(Revocation))


def grants(**query: Any) -> Call:
    return Call("GET", "/v1/audit/grants", _decoding(_GrantPage), params=_params(**query))


def audit_events(**query: Any) -> Call:
    return Call("GET", "/v1/audit/events", _decoding(_EventPage), params=_params(**query))


def checkpoint() -> Call:
    return Call("GET", "/v1/audit/checkpoints/latest", _decoding(Checkpoint))


class _CapabilityPage(msgspec.Struct, rename="camel"):
    items: list[Capability]
    next_cursor: str | None = None


class _GrantPage(msgspec.Struct, rename="camel"):
    items: list[Grant]
    next_cursor: str | None = None


class _EventPage(msgspec.Struct, rename="camel"):
    items: list[AuditEvent]
    next_cursor: str | None = None


def next_page(call: Call, page: Any) -> Call | None:
    """The call for the page after `page`, or None at the end."""
    return call.with_param("cursor", page.next_cursor) if page.next_cursor else None


# ---------------------------------------------------------------------------
# Answers, retries and the ETag cache


def read_answer(call: Call, status: int, body: bytes, retry_after: float | None = None) -> Any:
    if 200 <= status < 300:
        try:
            return call.read(status, body)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise CapregError(
                f"the registry's answer to {call.method} {call.path} is not what this client reads: {exc}",
                status=status,
                code="unexpected_answer",
            ) from None
    raise error_from_answer(status, body, retry_after)


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """Retry-After as seconds: a number of seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (now if now is not None else time.time()))


@dataclass(frozen=True)
class RetryPolicy:
    """429 and 503 answers (and failed connections, which never reached the registry) are retried
    up to `retries` times; the wait honours Retry-After, else grows exponentially with jitter, and
    is capped by `max_wait`. Nothing else is retried."""

    retries: int = 3
    backoff: float = 0.5
    max_wait: float = 30.0

    def delay(self, attempt: int, retry_after: float | None) -> float | None:
        """Seconds to wait before attempt `attempt + 1`, or None when no retry is left."""
        if attempt >= self.retries:
            return None
        if retry_after is not None:
            return min(retry_after, self.max_wait)
        return min(self.backoff * (2**attempt) * (0.5 + random.random()), self.max_wait)


class EtagCache:
    """The last answer per (URL, credentials) with its ETag, for If-None-Match; least recently used
    entries go first beyond `size`."""

    def __init__(self, size: int = 256):
        self._entries: OrderedDict[tuple, tuple[str, bytes]] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()  # a Registry is shared between threads

    def lookup(self, key: tuple) -> tuple[str, bytes] | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def store(self, key: tuple, etag: str, body: bytes) -> None:
        with self._lock:
            self._entries[key] = (etag, body)
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)


def unreachable(base_url: str, exc: Exception) -> CapregError:
    return CapregError(f"cannot reach the registry at {base_url}: {exc or type(exc).__name__}", code="unreachable")
