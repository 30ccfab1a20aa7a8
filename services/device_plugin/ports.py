"""Interfaces the plugin core depends on (adapters implement them).

``FabricPort`` is the node's fabric service as the plugin needs it;
``HealthSource`` is the hook for extra health inputs: a callable returning
``{pci_address: reason}`` for GPUs that must be reported Unhealthy (e.g. a
GPULease that is neither Free nor Leased). Sources are polled with the sysfs
health check; an exception from a source is logged and the source ignored for
that round.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

HealthSource = Callable[[], Mapping[str, str]]


@dataclass(frozen=True)
class FabricTopology:
    """The fabric service's view: physical ids and per-GPU health."""

    gpus: tuple[Mapping[str, object], ...]  # {"physical_id", "pci_bus_id", "healthy", "reason"}
    source: str
    failed: Mapping[str, str] = field(default_factory=dict)  # pci -> reason


@dataclass(frozen=True)
class Activation:
    holder: str
    gpus: tuple[str, ...]
    partition_ids: tuple[int, ...]
    nvlink: bool


@dataclass(frozen=True)
class LiveHolder:
    holder: str
    pod: str | None  # "namespace/name"


@runtime_checkable
class FabricPort(Protocol):
    def topology(self) -> FabricTopology: ...

    def activate(self, holder: str, gpus: Iterable[str]) -> Activation: ...

    def release(self, holder: str) -> None: ...

    def sync(self, live: Iterable[LiveHolder], grace_seconds: float) -> None: ...

    def close(self) -> None: ...
