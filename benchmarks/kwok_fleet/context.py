"""What the parts of one mode's run hold in common."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from benchmarks.kwok_fleet.timers import Timers


@dataclass
class RunContext:
    """The API server (``core.kube``'s adapter, as the cluster admin), the worker threads, the
    timers, one lock over every record (the pods' watch, the timers and the workers all change
    them), and the errors met: recorded, the run goes on."""

    kube: Any
    pool: ThreadPoolExecutor
    timers: Timers
    lock: threading.RLock
    errors: list[str] = field(default_factory=list)
