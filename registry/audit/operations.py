"""The audit operations, declared once (registry.operations.boundary): the tenant's events, their
hourly counts, the grant report, the chain's verification and its inclusion proof, each needing
`audit:read`. A refusal is the caller's `request.refused`, about the request's method and path."""

from __future__ import annotations

from auth.policy import AUDIT_READ_SCOPE
from registry.operations.boundary import Operation
from registry.operations.refusals import REFUSED

EVENTS = Operation(name="audit.events.read", denial_event=REFUSED, scope=AUDIT_READ_SCOPE)
HOURLY = Operation(name="audit.events.hourly", denial_event=REFUSED, scope=AUDIT_READ_SCOPE)
GRANTS = Operation(name="audit.grants.read", denial_event=REFUSED, scope=AUDIT_READ_SCOPE)
CHAIN = Operation(name="audit.chain.verify", denial_event=REFUSED, scope=AUDIT_READ_SCOPE)
PROOF = Operation(name="audit.proof.read", denial_event=REFUSED, scope=AUDIT_READ_SCOPE)
