"""Publisher keys and registrations as signed, the service (docs/api.md#signed-cards): setting and
reading a tenant's publisher keys (audited `tenant.keys.updated`), the publisher signature a
registration must carry (`verified_publisher`, refusals audited as `agent.registered` denied), and
the last applied registration body, byte for byte. Decisions are auth.policy's, the checks on keys
and signatures registry.agents.publisher_signatures', the SQL db/signatures.py.
"""

from __future__ import annotations

from typing import Any

import msgspec

from auth.policy import (
    can_see,
    check_publisher_keys_read,
    check_publisher_keys_write,
    check_registration_read,
)
from auth.principal import Caller
from db import agents as agent_queries
from db import signatures as signature_queries
from db.group_commit import WriteScope
from registry.agents.publisher_signatures import jwks_errors, verify_registration
from registry.core import error_codes as codes
from registry.core.bounded_checks import bounded
from registry.core.problems import ErrorItem, ProblemError, invalid_request, not_found, refused
from registry.core.records import AgentRegistration, agent_ref
from registry.core.tracing import current_request_id
from registry.core.wire import Wire
from registry.operations.audit_events import caller_event
from registry.state import Registry

KEYS_UPDATED = "tenant.keys.updated"


class PublisherJwks(Wire, forbid_unknown_fields=True):
    """`PUT`/`GET /v1/tenants/{tenant}/publisher-keys`: a JWKS of public keys (at most 20, checked
    by registry.agents.publisher_signatures.jwks_errors, not by the type, so that the refusal says why)."""

    keys: list[Any]


def _no_downgrade_message(has_keys: bool) -> str:
    if has_keys:
        return "this tenant has publisher keys: a registration must carry a publisher signature in `signatures`"
    return "this agent was registered with a publisher signature: every later registration must be signed too"


async def put_keys(
    registry: Registry, caller: Caller, tenant: str, data: PublisherJwks, *, trace_id: str | None
) -> PublisherJwks:
    """Replace the tenant's publisher keys (an empty list removes them; agents registered signed stay
    bound to signing, registry.agents.service). Refusals and the change are audited."""

    def refusing(error: ProblemError) -> ProblemError:
        return error.about(tenant=tenant, ref=tenant)

    refusal = check_publisher_keys_write(caller, tenant)
    if refusal is not None:
        raise refusing(refused(refusal))
    errors = jwks_errors(data.keys)
    if errors:
        raise refusing(invalid_request("not an acceptable set of publisher keys", errors))
    keys = [dict(key) for key in data.keys]
    kids = " ".join(key["kid"] for key in keys)
    request_id = current_request_id()

    async def write(scope: WriteScope) -> None:
        await signature_queries.set_publisher_keys(scope.conn, tenant, keys)
        scope.audit(
            caller_event(
                caller,
                KEYS_UPDATED,
                tenant=tenant,
                ref=tenant,
                reason=f"kids: {kids}" if kids else "no keys",
                trace_id=trace_id,
                request_id=request_id,
            )
        )

    await registry.writes.run(write)
    return PublisherJwks(keys=keys)


async def get_keys(registry: Registry, caller: Caller, tenant: str, *, trace_id: str | None) -> PublisherJwks:
    """The tenant's publisher keys (own tenant, `registry:read`); a refusal is audited."""
    refusal = check_publisher_keys_read(caller, tenant)
    if refusal is not None:
        raise refused(refusal).about(tenant=tenant, ref=tenant)
    return PublisherJwks(keys=await signature_queries.publisher_keys(registry.pool, tenant))


async def verified_publisher(
    registry: Registry,
    caller: Caller,
    tenant: str,
    agent_id: str,
    data: AgentRegistration,
    body: bytes,
    *,
    trace_id: str | None,
) -> str | None:
    """The kid of the registration's valid publisher signature, or None when none is needed (the
    tenant has no publisher keys and the agent was never registered signed). Otherwise no signature
    is 400 `signature_required`, none valid 400 `signature_invalid`, each raised about the agent
    (recorded as the registration's denial, the code as reason); nothing is applied."""
    keys, previous_kid = await signature_queries.signature_requirements(registry.pool, tenant, agent_id)
    if not keys and previous_kid is None:
        return None

    def refusing(error: ProblemError) -> ProblemError:
        return error.about(tenant=tenant, ref=agent_ref(tenant, agent_id))

    if not data.signatures:
        raise refusing(
            ProblemError(
                codes.SIGNATURE_REQUIRED,
                _no_downgrade_message(bool(keys)),
                errors=[ErrorItem(path="/signatures", message="no publisher signature")],
            )
        )
    signatures = msgspec.to_builtins(data.signatures)
    try:
        kid, why = await bounded(
            verify_registration, body, signatures, keys, tenant, agent_id, what="verifying the publisher signatures"
        )
    except ProblemError as error:  # past the deadline: refused like any invalid signature
        raise refusing(ProblemError(codes.SIGNATURE_INVALID, error.detail, errors=error.errors)) from None
    if kid is None:
        raise refusing(
            ProblemError(
                codes.SIGNATURE_INVALID,
                "no valid publisher signature over the body without `signatures` for this tenant and agent id",
                errors=[ErrorItem(path="/signatures", message=why)],
            )
        )
    return kid


def fast_path_allowed(publisher_kid: str | None, kids: list[str]) -> bool:
    """Whether the exact bytes last applied may be answered as unchanged without verifying again:
    their signature's key is still one of the tenant's (signed), or no signature is needed (unsigned,
    and the tenant has no keys). Otherwise the full path decides, and refuses."""
    if publisher_kid is not None:
        return publisher_kid in kids
    return not kids


async def registration_body(
    registry: Registry, caller: Caller, tenant: str, agent_id: str, *, trace_id: str | None
) -> bytes:
    """The agent's last applied registration body, exactly as received (and signed)."""
    agent = await agent_queries.get_agent(registry.pool, tenant, agent_id)
    visible = agent is not None and can_see(
        caller, tenant=tenant, visibility=agent.visibility, shared_with=agent.shared_with
    )
    refusal = check_registration_read(caller, tenant, agent_visible=visible)
    if refusal is not None:
        raise refused(refusal).about(tenant=tenant, ref=agent_ref(tenant, agent_id))
    body = await signature_queries.registration_body(registry.pool, tenant, agent_id)
    if body is None:  # registered before bodies were kept: the next registration keeps one
        raise not_found("no registration body kept for this agent yet")
    return body
