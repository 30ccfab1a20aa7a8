"""``gpucaas sandbox`` for one benchmark run: started in a fresh folder under ``/tmp`` (its
unix socket paths must stay under 108 bytes), stopped after, its folder removed unless kept."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.kit.report import say
from devtools import folders

if TYPE_CHECKING:
    from devtools.sandbox.runner import Sandbox


@contextmanager
def sandbox(prefix: str, *, keep: Callable[[], bool] | None = None, **options: Any) -> Iterator[Sandbox]:
    """A running sandbox (``devtools.sandbox.runner.start`` with ``options``, its API on a free port).

    ``keep``: asked once it is stopped whether its state and logs stay for a look (they
    always do then when the run raised); without it the folder goes."""
    from devtools.ports import free_port
    from devtools.sandbox import runner

    state = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    sb: Sandbox | None = None
    failed = False
    try:
        sb = runner.start(state, api_port=free_port(), **options)
        yield sb
    except BaseException:
        failed = True
        raise
    finally:
        if sb is not None:
            sb.stop()
        if keep is not None and (failed or keep()):
            say(f"sandbox state and logs kept in {state}")
        else:
            folders.remove(state)
