"""The release operations, declared once for every door (registry.operations.boundary): the detail,
tool definition and argument validation routes and MCP's `get_capability` and `get_tool_definition`
(DETAIL), the extended card over HTTP+JSON and A2A's JSON-RPC (EXTENDED_CARD)."""

from __future__ import annotations

from registry.operations.boundary import Operation
from registry.release.service import DENIED

DETAIL = Operation(name="detail.release", denial_event=DENIED)
EXTENDED_CARD = Operation(name="card.extended", denial_event=DENIED)
