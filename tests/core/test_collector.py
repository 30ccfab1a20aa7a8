"""The collector pacing: full collections skip what the previous one left alive, and once
per interval walk everything again, so cyclic garbage among frozen objects is still freed."""

from __future__ import annotations

import gc
import weakref

import pytest

from core import collector


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> _Node:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return a


@pytest.fixture
def clock() -> list[float]:
    return [0.0]


@pytest.fixture
def pacing(clock: list[float]):
    stop = collector.freeze_survivors(full_every_s=600.0, clock=lambda: clock[0])
    yield
    stop()
    gc.collect()


def test_what_a_full_collection_leaves_is_frozen(pacing: None) -> None:
    kept = [_Node() for _ in range(1000)]
    before = gc.get_freeze_count()
    gc.collect()
    assert gc.get_freeze_count() >= before + len(kept)
    assert not any(o is kept for o in gc.get_objects())


def test_a_frozen_cycle_outlives_collections_until_the_interval_has_passed(pacing: None, clock: list[float]) -> None:
    held = _cycle()
    ref = weakref.ref(held)
    gc.collect()  # alive: frozen with the rest
    del held  # now cyclic garbage, but frozen
    gc.collect()
    assert ref() is not None, "frozen objects are out of the collector's sight"
    clock[0] += 601.0
    gc.collect()
    assert ref() is None, "the interval's full collection walks the frozen objects too"


def test_stop_gives_everything_back_to_the_collector(clock: list[float]) -> None:
    stop = collector.freeze_survivors(full_every_s=600.0, clock=lambda: clock[0])
    held = _cycle()
    ref = weakref.ref(held)
    gc.collect()
    del held
    assert gc.get_freeze_count() > 0
    stop()
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert ref() is None
