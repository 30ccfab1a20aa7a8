"""Bounded retries with exponential backoff, for idempotent calls that met :class:`Unavailable`.

Only reads, deletes and writes guarded by a resourceVersion (or a create whose
409 the caller treats as success) are idempotent; the caller says so. Other
errors (403, 404, 409, 422) are answers, never retried here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from core.backoff import Backoff

from .errors import Unavailable

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` in all (1 = no retry); delays grow by ``factor`` from ``initial_s`` up to ``max_s``."""

    attempts: int = 3
    initial_s: float = 0.2
    max_s: float = 2.0
    factor: float = 2.0
    jitter: float = 0.5  # each delay is drawn from [delay*(1-jitter), delay]

    def backoff(self) -> Backoff:
        """The jittered waits between this policy's attempts."""
        return Backoff(self.initial_s, self.max_s, factor=self.factor, jitter=self.jitter)

    def delays(self) -> list[float]:
        """The waits between attempts, before jitter."""
        nominal = Backoff(self.initial_s, self.max_s, factor=self.factor)
        return [nominal.delay(n) for n in range(1, self.attempts)]


NO_RETRY = RetryPolicy(attempts=1)
DEFAULT_RETRY = RetryPolicy()


def retrying(
    fn: Callable[[], T],
    policy: RetryPolicy = DEFAULT_RETRY,
    *,
    what: str = "",
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``fn()``, again after a backoff while it raises :class:`Unavailable`, at most ``policy.attempts`` times."""
    backoff, retries = policy.backoff(), max(0, policy.attempts - 1)
    for attempt in range(retries + 1):
        try:
            return fn()
        except Unavailable as exc:
            if attempt >= retries:
                raise
            delay = backoff.next()
            log.debug("%s: %s; retry %d/%d in %.2fs", what or "kubernetes call", exc, attempt + 1, retries, delay)
            sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover
