"""Exponential backoff: the one rule every retry, relist and restart in gpucaas waits by.

After ``n`` consecutive failures the wait is ``initial_s * factor ** (n - 1)``, at most
``max_s``; with ``jitter`` each wait is drawn from ``[wait * (1 - jitter), wait]`` so that many
clients failing together do not all come back in step. ``delay(n)`` is the pure rule, for
callers that keep the count themselves (a queue row's attempts, a supervised process's
crashes); ``next()`` counts a failure and answers its wait, ``reset()`` starts again after
a success.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

#: the exponent stops growing here (any cap is reached long before; a float overflows at 2**1024)
_MAX_EXPONENT = 64


@dataclass
class Backoff:
    """Waits that grow by ``factor`` from ``initial_s`` to ``max_s``; ``failures`` counts ``next()``."""

    initial_s: float = 1.0
    max_s: float = 60.0
    factor: float = 2.0
    jitter: float = 0.0
    failures: int = 0

    def delay(self, failures: int) -> float:
        """The wait after ``failures`` consecutive failures (none after 0)."""
        if failures <= 0:
            return 0.0
        wait = min(self.max_s, self.initial_s * self.factor ** min(failures - 1, _MAX_EXPONENT))
        return wait * (1 - self.jitter * random.random()) if self.jitter else wait

    def next(self) -> float:
        """Count one more failure; the wait before trying again."""
        self.failures += 1
        return self.delay(self.failures)

    def reset(self) -> None:
        """A success: the next failure waits ``initial_s`` again."""
        self.failures = 0
