"""Running a baseline's behaviour fixtures against a candidate's A2A endpoint with a2a-sdk's client
(docs/api.md#the-replay-gate), for `Registry.replay`, `AsyncRegistry.replay` and `capreg replay`.
Needs the a2a extra: pip install 'capreg[a2a]'.

One `message/send` per fixture: a data part holding its `input`, metadata `{"capreg.fixture": name}`.
What the answer says becomes one result of the report: `output` from its data part, the outcome from
the task state (`completed` is `ok`; otherwise the answer's metadata `capreg.errorCode`, else
`unknown_commit`), the side effect from its metadata `capreg.sideEffect` (absent: `destructive`, so an
implementation that does not report cannot pass a gate stricter than that).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import httpx
from a2a.client import ClientCallInterceptor, ClientConfig, ClientFactory
from a2a.client.auth import AuthInterceptor
from a2a.helpers.proto_helpers import get_data_parts, new_data_message
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    HTTPAuthSecurityScheme,
    Role,
    SecurityRequirement,
    SecurityScheme,
    SendMessageRequest,
    StringList,
    TaskState,
)
from google.protobuf.json_format import MessageToDict

FIXTURE_KEY = "capreg.fixture"
ERROR_CODE_KEY = "capreg.errorCode"
SIDE_EFFECT_KEY = "capreg.sideEffect"
SIDE_EFFECTS = ("none", "idempotent", "write", "destructive")
UNKNOWN_COMMIT = "unknown_commit"
UNREPORTED_SIDE_EFFECT = "destructive"
_OUTCOME_MAX = 64


def target_card(instance_url: str, *, with_ticket: bool) -> AgentCard:
    """The card the runner calls: the instance's JSON-RPC endpoint (no card is fetched from it), and,
    with a ticket, the bearer scheme a2a-sdk needs declared before it sends credentials."""
    card = AgentCard(
        name="replay target",
        description="the candidate's instance",
        version="0",
        supported_interfaces=[AgentInterface(url=instance_url, protocol_binding="JSONRPC", protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=False),
        default_input_modes=["application/json"],
        default_output_modes=["application/json"],
    )
    if with_ticket:
        card.security_schemes["capreg"].CopyFrom(
            SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="bearer", bearer_format="JWT"))
        )
        card.security_requirements.append(SecurityRequirement(schemes={"capreg": StringList()}))
    return card


def _metadata(*holders: Any) -> dict[str, Any]:
    """The metadata of the answer's parts that carry some, later ones (the task's own) winning."""
    merged: dict[str, Any] = {}
    for holder in holders:
        if holder is not None and holder.HasField("metadata"):
            merged.update(MessageToDict(holder.metadata))
    return merged


def _outcome(code: Any) -> str:
    text = code if isinstance(code, str) else ""
    ok = 0 < len(text) <= _OUTCOME_MAX and text[0].isalnum() and all(c.isalnum() or c in "._:-" for c in text)
    return text if ok else UNKNOWN_COMMIT


def observed(fixture: str, answers: Sequence[Any], duration_ms: int) -> dict[str, Any]:
    """One result of the report from the a2a-sdk answers (StreamResponse) to a fixture's message."""
    message = task = None
    for answer in answers:
        if answer.HasField("task"):
            task = answer.task
        elif answer.HasField("message"):
            message = answer.message
    parts, holders = [], []
    if task is not None:
        status_message = task.status.message if task.status.HasField("message") else None
        for artifact in task.artifacts:
            parts += list(artifact.parts)
            holders.append(artifact)
        if status_message is not None:
            parts += list(status_message.parts)
            holders.append(status_message)
        holders.append(task)
        completed = task.status.state == TaskState.TASK_STATE_COMPLETED
    else:
        completed = message is not None  # a direct message answer: the call completed
        if message is not None:
            parts, holders = list(message.parts), [message]
    metadata = _metadata(*holders)
    side_effect = metadata.get(SIDE_EFFECT_KEY)
    result: dict[str, Any] = {
        "fixture": fixture,
        "outcome": "ok" if completed else _outcome(metadata.get(ERROR_CODE_KEY)),
        "sideEffect": side_effect if side_effect in SIDE_EFFECTS else UNREPORTED_SIDE_EFFECT,
        "durationMs": duration_ms,
    }
    data = get_data_parts(parts)
    if data:
        result["output"] = _integral(data[0])
    return result


def _integral(value: Any) -> Any:
    """A data part's numbers as JSON wrote them: protobuf's Struct keeps every number as a double,
    so 1299 arrives as 1299.0 (an outputSchema's `integer` must still hold). Depth is protobuf's
    (bounded by its parser)."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= 2**53:
        return int(value)
    if isinstance(value, dict):
        return {key: _integral(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_integral(item) for item in value]
    return value


def unanswered(fixture: str, duration_ms: int) -> dict[str, Any]:
    """The result of a fixture whose call failed: nothing is known of what it did."""
    return {
        "fixture": fixture,
        "outcome": UNKNOWN_COMMIT,
        "sideEffect": UNREPORTED_SIDE_EFFECT,
        "durationMs": duration_ms,
    }


async def run_fixtures(
    fixtures: Iterable[dict[str, Any]],
    instance_url: str,
    *,
    credentials: Any | None = None,
    timeout: float = 30.0,
) -> list[dict[str, Any]]:
    """The report's results: each fixture sent to `instance_url` in turn. `credentials` (an a2a-sdk
    CredentialService such as registry.client.a2a.TicketCredentials) is presented as a bearer token."""
    results = []
    async with httpx.AsyncClient(timeout=timeout) as http:
        interceptors: list[ClientCallInterceptor] = [AuthInterceptor(credentials)] if credentials is not None else []
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(
            target_card(instance_url, with_ticket=credentials is not None), interceptors=interceptors
        )
        for fixture in fixtures:
            name = fixture["name"]
            message = new_data_message(fixture.get("input", {}), role=Role.ROLE_USER)
            message.metadata.update({FIXTURE_KEY: name})
            started = time.monotonic()
            try:
                answers = [answer async for answer in client.send_message(SendMessageRequest(message=message))]
            except Exception:  # noqa: BLE001 - a transport or protocol failure is this fixture's result
                results.append(unanswered(name, int((time.monotonic() - started) * 1000)))
                continue
            results.append(observed(name, answers, int((time.monotonic() - started) * 1000)))
    return results
