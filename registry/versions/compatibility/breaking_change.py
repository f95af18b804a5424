"""A breaking change: the finding every compatibility rule (registry.versions.compatibility) returns."""

from __future__ import annotations

from typing import Literal

import msgspec

# Which side of a skill a schema is: input schemas are contravariant, output schemas covariant.
Direction = Literal["input", "output"]


class BreakingChange(msgspec.Struct, frozen=True):
    """One breaking change: where (a JSON pointer into the skill), what kind, and a sentence."""

    path: str
    kind: str
    message: str
