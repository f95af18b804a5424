"""The agent operations, declared once (registry.operations.boundary), and the heartbeat's body.
Registration's refusals are `agent.registered` denied, but an attempt on a published version (409)
is `version.published` (the service says so: registry.agents.service.register)."""

from __future__ import annotations

from typing import Annotated

import msgspec

from auth.policy import PUBLISH_SCOPE
from registry.agents.publisher_keys import KEYS_UPDATED, PublisherJwks
from registry.agents.service import REGISTERED
from registry.core.records import AgentRegistration
from registry.core.wire import Wire
from registry.operations.boundary import Operation
from registry.operations.refusals import REFUSED


class Heartbeat(Wire, forbid_unknown_fields=True):
    instance_id: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")]
    ttl_seconds: Annotated[int, msgspec.Meta(ge=5, le=3600)] = 30
    # No control characters: the value joins a statement shared with other requests' heartbeats.
    url: Annotated[str, msgspec.Meta(max_length=2048, pattern=r"^[^\x00-\x1f\x7f]*$")] | None = None
    # The instance's own estimate of how busy it is (routers prefer the least loaded).
    load: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None


REGISTER = Operation(name="agent.register", denial_event=REGISTERED, body=AgentRegistration)
# Liveness is not a decision (docs/audit.md): only a refusal by policy is recorded.
HEARTBEAT = Operation(name="agent.heartbeat", denial_event=REFUSED, scope=PUBLISH_SCOPE, body=Heartbeat)
REGISTRATION_BODY = Operation(name="agent.registration.read", denial_event=REFUSED)
PUBLISHER_KEYS_PUT = Operation(name="tenant.keys.update", denial_event=KEYS_UPDATED, body=PublisherJwks)
PUBLISHER_KEYS_GET = Operation(name="tenant.keys.read", denial_event=REFUSED)
