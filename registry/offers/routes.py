"""HTTP: offers (docs/api.md#offers). The service is registry.offers.service."""

from __future__ import annotations

from litestar import Request, post

from registry.core.problems import ProblemError, problem_responses
from registry.core.refusals import refuse_request
from registry.offers.service import OfferAnswer, OfferRequest, make_offers
from registry.state import registry_of, trace_id_of
from registry.web.authentication import authenticate
from registry.web.request_guard import body_schema, read_body


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
    caller = await authenticate(request, "registry:read")
    registry = registry_of(request)
    try:
        body = await read_body(request, OfferRequest)
        return await make_offers(registry, caller, body, trace_id=trace_id_of(request))
    except ProblemError as error:
        # Bad input is the caller's refusal, audited once (a refused ticket is not raised here).
        raise await refuse_request(request, caller, error) from None


ROUTES = [offers]
