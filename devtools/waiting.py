"""Bounded polling, shared by the tests and the sandbox (no wall-clock assertions: a generous
limit only turns a hang into a clear failure)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


class WaitTimeout(AssertionError, TimeoutError):
    """The condition did not hold in time (an assertion failure in tests, a time-out elsewhere)."""


def wait_for(
    predicate: Callable[[], Any], timeout: float = 120.0, *, interval: float = 0.1, what: str = "condition"
) -> Any:
    """Poll until ``predicate()`` is truthy and return its value; raise ``WaitTimeout`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what} (last value: {last!r})")
