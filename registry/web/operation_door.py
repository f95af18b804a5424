"""The HTTP door of a declared operation (registry.operations.boundary): authenticate the caller,
then, at the boundary, the declared scope, the body decoded strictly into the declared type
(registry.web.request_guard), the service, and one record of a refusal. A route that serves an
operation is this call and the shaping of its answer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from litestar import Request

from auth.principal import Caller
from registry.operations.boundary import Operation, run
from registry.operations.refusals import door_subject
from registry.state import registry_of, trace_id_of
from registry.web.authentication import authenticate
from registry.web.request_guard import read_body

T = TypeVar("T")


async def serve(request: Request, operation: Operation, call: Callable[[Caller, Any], Awaitable[T]]) -> T:
    """`call(caller, body)` for an authenticated caller (401 first, never recorded), run at the
    boundary; `body` is the request body as `operation.body` (None when the operation takes none)."""
    registry, trace_id = registry_of(request), trace_id_of(request)
    caller = await authenticate(request)

    async def step() -> T:
        body: Any = None
        if operation.body is not None:
            body = await read_body(request, operation.body)
        return await call(caller, body)

    return await run(registry, operation, caller, step, trace_id=trace_id, door=lambda: door_subject(request))
