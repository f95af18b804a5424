"""The version lifecycle and replay-gate operations, declared once (registry.operations.boundary)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import msgspec

from registry.core.date_times import check_date_time
from registry.core.wire import Wire
from registry.operations.boundary import Operation
from registry.operations.refusals import REFUSED
from registry.versions.lifecycle import DEPRECATED, RETIRED, WITHDRAWN
from registry.versions.replay_judge import ReplayReport
from registry.versions.replays import REPLAYED


class Deprecation(Wire, forbid_unknown_fields=True):
    sunset_at: datetime | None = None
    message: Annotated[str, msgspec.Meta(max_length=1024)] | None = None

    def __post_init__(self) -> None:
        check_date_time("sunsetAt", self.sunset_at)


DEPRECATE = Operation(name="version.deprecate", denial_event=DEPRECATED, body=Deprecation)
RETIRE = Operation(name="version.retire", denial_event=RETIRED)
WITHDRAW = Operation(name="agent.withdraw", denial_event=WITHDRAWN)
REPLAY_SUBMIT = Operation(name="version.replay.submit", denial_event=REPLAYED, body=ReplayReport)
REPLAY_LIST = Operation(name="version.replay.list", denial_event=REFUSED)
