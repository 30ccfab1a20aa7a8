"""A benchmark's report: its one JSON object as the last line of stdout, its progress on
stderr, and the percentile its figures are taken with.

The last line of stdout is each benchmark's contract (``docs/figures.md``, ``make bench``,
``tests/benchmarks``): :func:`emit` writes it; everything said along the way goes to stderr
(:func:`say`), so that the line stays last.

Every percentile is the nearest rank: the smallest value with at least ``q`` of the values at
or below it (the ``ceil(q n)``-th smallest). It is always one of the measured values, never an
interpolation between two, so a p99 of 2,000 calls is the 20th-slowest call.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable, Sequence
from typing import Any


def emit(result: dict[str, Any]) -> None:
    """Print ``result`` as one JSON line on stdout: the benchmark's last line."""
    print(json.dumps(result), flush=True)


def say(text: str) -> None:
    """One line of progress or detail on stderr."""
    print(text, file=sys.stderr, flush=True)


def percentile(values: Iterable[float], q: float, *, empty: float = 0.0) -> float:
    """The nearest-rank ``q`` quantile (``q`` from 0 to 1) of ``values``; ``empty`` when there are none."""
    ordered: Sequence[float] = sorted(values)
    if not ordered:
        return empty
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def p50_p99(name: str, values_ms: Sequence[float], *, digits: int = 1, empty: float = 0.0) -> dict[str, float]:
    """``{name}_p50_ms`` and ``{name}_p99_ms`` of ``values_ms``, rounded to ``digits``."""
    return {
        f"{name}_p50_ms": round(percentile(values_ms, 0.5, empty=empty), digits),
        f"{name}_p99_ms": round(percentile(values_ms, 0.99, empty=empty), digits),
    }
