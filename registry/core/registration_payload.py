"""The bytes a publisher signature over a registration covers: one definition, which the client
signs (registry.client.signing) and the server verifies (registry.agents.publisher_signatures), so
the two cannot disagree and the server imports nothing from the client SDK."""

from __future__ import annotations

from typing import Any

import msgspec
import rfc8785


def registration_payload(body: bytes | dict[str, Any], *, tenant: str, agent_id: str) -> bytes:
    """The bytes a publisher signature covers: RFC 8785 of `{"agentId": agent_id, "registration": the
    body without signatures, "tenant": tenant}`. The tenant and agent id are in the signed bytes so a
    signature authorises one resource: the same body replayed to another agent or tenant does not
    verify. Raises ValueError (rfc8785.CanonicalizationError, msgspec.DecodeError) when there is no
    such form."""
    value = msgspec.json.decode(body) if isinstance(body, bytes | str) else dict(body)
    if not isinstance(value, dict):
        raise ValueError("a registration body is a JSON object")
    value.pop("signatures", None)
    return rfc8785.dumps({"agentId": agent_id, "registration": value, "tenant": tenant})
