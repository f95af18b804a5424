"""HTTP: offers (docs/api.md#offers). The service is registry.offers.service."""

from __future__ import annotations

from litestar import Request, post

from registry.core.problems import problem_responses
from registry.offers.operations import OFFERS
from registry.offers.service import OfferAnswer, OfferRequest, make_offers
from registry.state import registry_of, trace_id_of
from registry.web.operation_door import serve
from registry.web.request_guard import body_schema


@post(
    "/v1/offers",
    status_code=200,
    summary="Which capability, which version, which instance, now: ranked offers for a need",
    description=(
        "Candidates are the latest capability versions the caller could be released now (visible, in force, "
        "scopes held, data regions met) whose agent has a live instance, best first; `excluded` counts the "
        "visible ones left out by their first reason. With `ticket`, the first offer carries what POST "
        "/v1/tickets would answer for it. Needs `registry:read`."
    ),
    dependencies=body_schema(OfferRequest),
    responses=problem_responses(400, 401, 403),
)
async def offers(request: Request) -> OfferAnswer:
    registry, trace_id = registry_of(request), trace_id_of(request)
    return await serve(request, OFFERS, lambda caller, body: make_offers(registry, caller, body, trace_id=trace_id))


ROUTES = [offers]
