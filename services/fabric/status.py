"""What the fabric service knows about Fabric Manager: reachability, replays, fabric resets
and layout problems, kept for ``/healthz``, the metrics and the published FabricState."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass
class FabricStatus:
    """What the service knows about Fabric Manager, for health and publishing."""

    reachable: bool = False
    message: str = ""
    replays: int = 0
    last_replay_at: datetime | None = None
    last_replay_s: float | None = None
    fabric_resets: int = 0
    last_fabric_reset_at: datetime | None = None
    layout_problems: list[str] | None = None
