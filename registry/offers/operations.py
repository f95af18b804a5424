"""The offers operation, declared once for POST /v1/offers and MCP's `find_capability`
(registry.operations.boundary). Every refusal, bad input included, is the caller's `request.refused`."""

from __future__ import annotations

from registry.offers.service import OfferRequest
from registry.operations.boundary import Operation
from registry.operations.refusals import REFUSED

OFFERS = Operation(name="offers", denial_event=REFUSED, scope="registry:read", body=OfferRequest, audit_malformed=True)
