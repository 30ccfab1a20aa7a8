"""Short full collections for a long-running process whose long-lived objects keep growing.

CPython's cyclic garbage collector walks every tracked object in a full (generation 2)
collection, and nothing else runs meanwhile: an asyncio loop stops for the whole walk. A
controller holds its watched objects (indices, per-object state) for its life, so each
full collection grows with the cluster; with a few hundred tenancies the tenancy
controller paused every handler for 150-320 ms several times a minute, which was the
whole tail of ``benchmarks.tenancy`` at 20 new tenancies per second.

:func:`freeze_survivors` moves what survives each full collection out of the collector's
sight (:func:`gc.freeze`), so the next one walks only what was created since. Objects
frozen that later become cyclic garbage would never be freed that way, so once per
``full_every_s`` a full collection first takes the frozen objects back (:func:`gc.unfreeze`)
and walks everything: one long pause per interval instead of several a minute, and
memory bounded as before. Refcounting, which frees almost everything, is untouched.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

#: How often a full collection also walks the frozen objects (seconds).
FULL_EVERY_S = 600.0


def freeze_survivors(
    full_every_s: float = FULL_EVERY_S, clock: Callable[[], float] = time.monotonic
) -> Callable[[], None]:
    """Freeze what each full collection leaves, walking everything once per ``full_every_s``.

    Freezes what exists now. Returns a function that stops it (and unfreezes)."""
    last_full = clock()

    def on_collection(phase: str, info: dict[str, Any]) -> None:
        nonlocal last_full
        if info.get("generation") != 2:
            return
        if phase == "start":
            if clock() - last_full >= full_every_s:
                gc.unfreeze()  # into the oldest generation: this collection walks them too
                last_full = clock()
        else:
            gc.freeze()

    gc.freeze()
    gc.callbacks.append(on_collection)

    def stop() -> None:
        if on_collection in gc.callbacks:
            gc.callbacks.remove(on_collection)
        gc.unfreeze()

    return stop
