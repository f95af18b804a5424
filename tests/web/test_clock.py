"""The one clock (registry.core.clock): a SteppedClock moves wall and monotonic time together and
never back, and no rule in registry/ reads the system's clocks around it."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from registry.core.clock import SteppedClock
from tests.conftest import ROOT


@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), max_size=20))
def test_a_stepped_clock_moves_both_readings_by_what_it_is_told(steps):
    clock = SteppedClock(datetime(2026, 1, 1, tzinfo=UTC))
    wall, mono = clock.now(), clock.monotonic()
    for step in steps:
        clock.advance(step)
    assert clock.monotonic() - mono == pytest.approx(sum(steps), abs=1e-6)  # floats near 1e6
    assert (clock.now() - wall).total_seconds() == pytest.approx(sum(steps), abs=1e-3)
    assert clock.epoch() == clock.now().timestamp()


def test_a_stepped_clock_never_goes_back():
    with pytest.raises(ValueError):
        SteppedClock().advance(-1)


# Reads of the system's clocks that are not a rule's time (registry.core.clock's docstring says which
# clock each rule reads): measurements, reload throttles, defaults of functions called with `now`.
ALLOWED = {
    "registry/core/clock.py",  # the clock itself
    "registry/search/index_sync.py",  # how long an index build took (a report)
    "registry/state.py",  # the keyring's reload throttle, on auth.keys' stamp
    "registry/core/response_cache.py",  # a default for callers that pass no `now`
    "registry/core/bounded_work.py",  # idle schema workers stopped after a while
    "registry/web/observability.py",  # the access log line's timestamp
    "registry/core/signing_keys.py",  # `capreg keys rotate`: the CLI's own moment
}
CLOCK_READ = re.compile(r"\b(time\.time|time\.monotonic|datetime\.now|datetime\.utcnow)\(")


def test_no_rule_reads_the_system_clock_around_the_one_clock():
    readers = sorted(
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "registry").rglob("*.py")
        if path.relative_to(ROOT).parts[1] not in ("cli", "client") and CLOCK_READ.search(path.read_text())
    )
    assert [path for path in readers if path not in ALLOWED] == []
