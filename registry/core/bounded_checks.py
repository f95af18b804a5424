"""A registrant's input checked as a step of a request, in a worker process (registry.core.bounded_work):
running past the deadline, or a worker dying, is the caller's own 400 `invalid_request` saying what
took too long. Kept apart from bounded_work so that its workers never import the HTTP error types."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from registry.core.bounded_work import WorkFailed, WorkTimedOut, run_bounded
from registry.core.problems import ErrorItem, invalid_request

T = TypeVar("T")


async def bounded(function: Callable[..., T], *args: Any, what: str) -> T:
    """`function(*args)` in a worker process (registry.core.bounded_work); past the deadline, or if the
    worker dies, 400 `invalid_request` saying what took too long."""
    try:
        return await run_bounded(function, *args)
    except WorkTimedOut as error:
        raise invalid_request(
            f"{what} {error}", [ErrorItem(path="", message=f"{what} {error}; simplify the schemas")]
        ) from None
    except WorkFailed as error:
        raise invalid_request(f"{what} failed", [ErrorItem(path="", message=f"{what} failed: {error}")]) from None
