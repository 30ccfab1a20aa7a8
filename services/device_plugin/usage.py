"""Which pod holds which GPU: PodResources -> metrics, and the fabric's live-holder sync.

Every ``pod_resources_interval`` (and on demand after an activation conflict)
the kubelet's PodResources list is read; GPUs of our resource are exported by
state (free / allocated / unhealthy) and by namespace/pod, and the fabric
service is told which holders are alive so it releases the partitions of pods
that are gone (after ``fabric_sync_grace``, which covers the gap between
Allocate and the pod showing up in PodResources).
"""

from __future__ import annotations

import logging
import threading

from services.device_plugin.errors import DevicePluginError
from services.device_plugin.fabric import holder_for
from services.device_plugin.metrics import Metrics
from services.device_plugin.plugin import PluginCore
from services.device_plugin.podresources import ContainerDevices, PodResourcesReader
from services.device_plugin.ports import LiveHolder

logger = logging.getLogger(__name__)


def live_holders(containers: list[ContainerDevices]) -> list[LiveHolder]:
    return [LiveHolder(holder_for(c.device_ids), f"{c.namespace}/{c.pod}") for c in containers if c.device_ids]


class UsageMonitor:
    def __init__(
        self,
        core: PluginCore,
        reader: PodResourcesReader,
        metrics: Metrics,
        *,
        resource_name: str,
        interval: float,
        grace: float,
    ) -> None:
        self.core = core
        self.reader = reader
        self.metrics = metrics
        self.resource_name = resource_name
        self.interval = interval
        self.grace = grace
        self.node = core.node
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reachable: bool | None = None
        self.last: list[ContainerDevices] = []

    def scan(self, *, sync_fabric: bool = True) -> list[ContainerDevices]:
        """One round: read PodResources, export metrics, sync the fabric's live holders."""
        with self._lock:
            try:
                containers = self.reader.list(self.resource_name)
            except DevicePluginError as exc:
                if self._reachable is not False:
                    logger.warning("node=%s %s; GPU-to-pod metrics stale, no fabric sync", self.node, exc)
                self._reachable = False
                raise
            if self._reachable is False:
                logger.info("node=%s PodResources reachable again", self.node)
            self._reachable = True
            self.last = containers
            self._export(containers)
            if sync_fabric:
                try:
                    self.core.fabric.sync(live_holders(containers), self.grace)
                except DevicePluginError as exc:
                    logger.info("node=%s fabric live-holder sync skipped: %s", self.node, exc)
            return containers

    def _export(self, containers: list[ContainerDevices]) -> None:
        devices, _ = self.core.snapshot()
        pmap = self.core.physical_map
        held = {bdf: c for c in containers for bdf in c.device_ids}
        m, node = self.metrics, self.node
        m.gpu_allocation.clear()
        m.gpus_by_namespace.clear()
        counts = {"free": 0, "allocated": 0, "unhealthy": 0}
        per_ns: dict[str, int] = {}
        for d in devices:
            holder = held.get(d.bdf)
            if holder is not None:
                counts["allocated"] += 1
                pid = pmap.physical(d.bdf)
                m.gpu_allocation.labels(
                    node, d.bdf, "" if pid is None else str(pid), holder.namespace, holder.pod, holder.container
                ).set(1)
                per_ns[holder.namespace] = per_ns.get(holder.namespace, 0) + 1
            elif not d.healthy:
                counts["unhealthy"] += 1
            else:
                counts["free"] += 1
        for state, n in counts.items():
            m.gpus.labels(node, state).set(n)
        for ns, n in per_ns.items():
            m.gpus_by_namespace.labels(node, ns).set(n)

    def sync_now(self) -> None:
        """Used by Allocate on an activation conflict."""
        self.scan(sync_fabric=True)

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="dp-podresources", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            try:
                self.scan()
            except DevicePluginError:
                pass  # logged in scan
            except Exception:  # the monitor never dies
                logger.exception("node=%s PodResources scan failed", self.node)
            if self._stop.wait(self.interval):
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
