"""The plugin's state and decisions, independent of gRPC: devices, health, choices, Allocate.

Two watcher threads keep it current: the device watcher re-reads sysfs, the
device nodes and the extra health sources every ``health_interval``; the fabric
watcher polls the fabric service's topology/health every ``fabric_poll_interval``.
Every change of the advertised list (a GPU appears, goes Unhealthy or recovers)
bumps ``version`` and wakes the ListAndWatch streams.

A GPU once advertised stays in the list for the life of the process: when its
sysfs entry, vfio binding or device node goes away it is reported Unhealthy
(and dropped from the CDI spec) rather than silently removed, so the kubelet
stops scheduling on it and the reason is logged.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from core import vfio_sysfs as sysfs
from core.backoff import Backoff
from core.cdi import SpecWriter, qualified_name
from core.vfio_devices import GPU, Inventory
from services.device_plugin.allocation import (
    SOURCE_FABRIC,
    PhysicalMap,
    Shape,
    preferred,
    shape_of,
)
from services.device_plugin.errors import (
    ActivationConflict,
    CDISpecError,
    DevicePluginError,
    DeviceReleasing,
    DeviceUnhealthy,
    FabricUnavailable,
    InvalidRequest,
    UnknownDevice,
)
from services.device_plugin.fabric import holder_for
from services.device_plugin.metrics import Metrics
from services.device_plugin.ports import Activation, FabricPort, FabricTopology, HealthSource
from services.device_plugin.settings import DevicePluginSettings

logger = logging.getLogger(__name__)

# A holder key as the fabric service names it in a conflict: gpus:<pci>+<pci>...
_HOLDER = re.compile(r"gpus:[0-9A-Fa-f:.+]+[0-9A-Fa-f]")


@dataclass(frozen=True)
class DeviceState:
    bdf: str
    healthy: bool
    reason: str | None
    numa_node: int | None
    physical_id: int | None


@dataclass(frozen=True)
class ContainerAllocation:
    """What Allocate answers for one container."""

    device_ids: tuple[str, ...]
    cdi_devices: tuple[str, ...]
    envs: dict[str, str]
    annotations: dict[str, str]
    shape: Shape
    activation: Activation | None


@dataclass
class _Snapshot:
    devices: tuple[DeviceState, ...] = ()
    version: int = 0
    extra: dict[str, str] = field(default_factory=dict)


class PluginCore:
    def __init__(
        self,
        settings: DevicePluginSettings,
        fabric: FabricPort,
        metrics: Metrics,
        health_sources: Iterable[HealthSource] = (),
    ) -> None:
        self.settings = settings
        self.fabric = fabric
        self.metrics = metrics
        self.node = settings.node_name
        self._health_sources: list[HealthSource] = list(health_sources)
        self._transient_sources: list[HealthSource] = []
        self._transient: dict[str, str] = {}
        self._allocation_listeners: list[Callable[[tuple[str, ...]], None]] = []
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._known: dict[str, GPU] = {}
        self._inventory = Inventory()
        self._fabric_topo: FabricTopology | None = None
        self._fabric_reachable: bool | None = None
        self._pmap = PhysicalMap({}, "unknown")  # until the first refresh
        self._fabric_map: PhysicalMap | None = None
        self._snap = _Snapshot()
        self._extra: dict[str, str] = {}
        self._logged_left_out: set[tuple[str, str]] = set()
        self._logged_problems: set[str] = set()
        self._spec = SpecWriter(settings.cdi_dir, settings.cdi_kind, settings.dev_root)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        #: Called once when an activation hits a conflict (the PodResources sync
        #: sets it to "sync live holders now"), then the activation is retried.
        self.on_conflict: Callable[[], None] | None = None
        # holders of the pods PodResources lists now (set with on_conflict, read after it)
        self.live_holders: Callable[[], set[str]] | None = None

    # --- hooks -----------------------------------------------------------------------
    def add_transient_source(self, source: HealthSource) -> None:
        """GPUs unavailable only until their release completes (``{pci address: reason}``,
        e.g. a lease Releasing or Checking). Also give them through a health source, so the
        kubelet stops choosing them; Allocate does not refuse them when that is their only
        fault: the kubelet may have chosen one before it heard, and a refused Allocate fails
        the pod for good (UnexpectedAdmissionError), while a refused PreStartContainer (which
        still refuses them) is retried by the kubelet until the release is done."""
        with self._lock:
            self._transient_sources.append(source)

    def add_health_source(self, source: HealthSource) -> None:
        """Extra health input: ``source()`` -> {pci address: reason} of GPUs to report Unhealthy."""
        with self._lock:
            self._health_sources.append(source)

    def add_allocation_listener(self, listener: Callable[[tuple[str, ...]], None]) -> None:
        """``listener(device_ids)`` after every successful Allocate (the GPU leases use it)."""
        with self._lock:
            self._allocation_listeners.append(listener)

    def inventory(self) -> Inventory:
        """The latest discovery pass."""
        with self._lock:
            return self._inventory

    # --- refresh ---------------------------------------------------------------------
    def refresh_devices(self) -> None:
        inventory = sysfs.scan(self.settings.sysfs_root, self.settings.dev_root)
        extra = self._poll(self._health_sources)
        transient = self._poll(self._transient_sources)
        with self._lock:
            self._inventory = inventory
            self._extra = extra
            self._transient = transient
            self._recompute()

    def _poll(self, sources: list[HealthSource]) -> dict[str, str]:
        found: dict[str, str] = {}
        for source in list(sources):
            try:
                for bdf, reason in dict(source()).items():
                    found.setdefault(bdf, str(reason))
            except Exception:  # a broken hook must not stop health reporting
                logger.exception("node=%s health source %r failed; ignored this round", self.node, source)
        return found

    def refresh_fabric(self) -> None:
        try:
            topo: FabricTopology | None = self.fabric.topology()
            reachable = True
            error: Exception | None = None
        except FabricUnavailable as exc:
            topo, reachable, error = None, False, exc
        except Exception as exc:  # noqa: BLE001 - any fabric answer we cannot use
            topo, reachable, error = None, False, exc
        with self._lock:
            if reachable != self._fabric_reachable:
                if reachable:
                    logger.info("node=%s fabric service reachable at %s", self.node, self.settings.fabric_socket)
                else:
                    logger.warning(
                        "node=%s fabric service unreachable (%s): partitions cannot be activated%s",
                        self.node,
                        error,
                        "" if self._fabric_map else "; physical ids fall back to PCI order",
                    )
            self._fabric_reachable = reachable
            self._fabric_topo = topo
            self.metrics.fabric_reachable.labels(self.node).set(1 if reachable else 0)
            self._recompute()

    def refresh(self) -> None:
        self.refresh_fabric()
        self.refresh_devices()

    def _recompute(self) -> None:
        inv = self._inventory
        current = inv.by_bdf()
        for bdf, gpu in current.items():
            if bdf not in self._known:
                logger.info(
                    "node=%s gpu=%s discovered: %s, %s, IOMMU group %d, NUMA %s%s",
                    self.node,
                    bdf,
                    gpu.model,
                    gpu.driver,
                    gpu.iommu_group,
                    gpu.numa_node,
                    f", iommufd {gpu.vfio_device}" if gpu.iommufd else "",
                )
            self._known[bdf] = gpu
        for lo in inv.left_out:
            key = (lo.bdf, lo.reason)
            if key not in self._logged_left_out and lo.bdf not in self._known:
                logger.warning("node=%s gpu=%s not advertised: %s", self.node, lo.bdf, lo.reason)
            self._logged_left_out.add(key)
        for problem in inv.problems:
            if problem not in self._logged_problems:
                logger.warning("node=%s unusable sysfs content: %s", self.node, problem)
                self._logged_problems.add(problem)

        # Physical ids: the fabric service's map, else PCI order.
        # Physical ids do not change while the node runs: once learnt from the fabric
        # service, the map is kept through its outages (only never-learnt means PCI order).
        topo = self._fabric_topo
        if topo is not None and topo.gpus:
            self._fabric_map = PhysicalMap.from_fabric(topo.gpus)
        if self._fabric_map is not None:
            pmap = self._fabric_map
        else:
            pmap = PhysicalMap.pci_order(inv.all_gpu_bdfs or tuple(self._known))
        if pmap.source != self._pmap.source:
            if pmap.source == SOURCE_FABRIC:
                logger.info("node=%s physical GPU ids now from the fabric service", self.node)
            else:
                logger.warning(
                    "node=%s physical GPU ids from PCI order (fabric service absent): "
                    "partition-shaped choices may not match the real NVLink partitions",
                    self.node,
                )
        self._pmap = pmap
        failed = dict(topo.failed) if topo is not None else {}

        left_out = {lo.bdf: lo.reason for lo in inv.left_out}
        states = []
        for bdf in sorted(self._known):
            gpu = self._known[bdf]
            reason = None
            if bdf not in current:
                if bdf in left_out:
                    reason = left_out[bdf]
                elif not sysfs.sysfs_entry_present(self.settings.sysfs_root, bdf):
                    reason = "PCI device gone from sysfs"
                else:
                    reason = next(
                        (p.split(": ", 1)[1] for p in inv.problems if p.startswith(f"{bdf}: ")), "no longer discovered"
                    )
            elif bdf in failed:
                reason = failed[bdf]
            elif bdf in self._extra:
                reason = self._extra[bdf]
            states.append(DeviceState(bdf, reason is None, reason, gpu.numa_node, pmap.physical(bdf)))
        states_t = tuple(states)
        if states_t != self._snap.devices:
            old = {d.bdf: d for d in self._snap.devices}
            for d in states_t:
                before = old.get(d.bdf)
                if before is not None and before.healthy != d.healthy:
                    if d.healthy:
                        logger.info("node=%s gpu=%s Healthy again", self.node, d.bdf)
                    else:
                        logger.warning("node=%s gpu=%s Unhealthy: %s", self.node, d.bdf, d.reason)
            self._snap = _Snapshot(states_t, self._snap.version + 1)
            self._changed.notify_all()
        try:
            self._spec.update(current.values())
        except (CDISpecError, OSError) as exc:
            logger.error("node=%s CDI spec not written: %s", self.node, exc)
        self._export(inv, states_t, pmap)

    def _export(self, inv: Inventory, states: tuple[DeviceState, ...], pmap: PhysicalMap) -> None:
        m, node = self.metrics, self.node
        m.not_vfio.labels(node).set(len(inv.left_out))
        m.left_out.clear()
        for lo in inv.left_out:
            m.left_out.labels(node, lo.bdf, lo.driver or "none", lo.reason).set(1)
        m.sysfs_problems.labels(node).set(len(inv.problems))
        m.topology_source.clear()
        m.topology_source.labels(node, pmap.source).set(1)
        for d in states:
            m.gpu_healthy.labels(node, d.bdf, self._known[d.bdf].model).set(1 if d.healthy else 0)

    # --- views -----------------------------------------------------------------------
    def snapshot(self) -> tuple[tuple[DeviceState, ...], int]:
        with self._lock:
            return self._snap.devices, self._snap.version

    def wait_for_change(self, version: int, timeout: float) -> int:
        """Block until ``version`` is outdated or ``timeout`` passes; the current version."""
        with self._changed:
            self._changed.wait_for(lambda: self._snap.version != version or self._stop.is_set(), timeout)
            return self._snap.version

    @property
    def physical_map(self) -> PhysicalMap:
        with self._lock:
            return self._pmap

    # --- kubelet requests ------------------------------------------------------------
    def preferred(self, available: Sequence[str], must_include: Sequence[str], size: int) -> list[str]:
        with self._lock:
            pmap = self._pmap
            numa = {b: g.numa_node for b, g in self._known.items()}
        return preferred(available, must_include, size, pmap, numa)

    def _check(self, ids: Sequence[str], *, admitting: bool = False) -> None:
        """Refuse unknown or unhealthy GPUs; when ``admitting`` (Allocate), not those whose only
        fault is transient (:meth:`add_transient_source`)."""
        if not ids:
            raise InvalidRequest("devices_ids is empty")
        with self._lock:
            unknown = [i for i in ids if i not in self._known]
            states = {d.bdf: d for d in self._snap.devices}
            transient = dict(self._transient)
        if unknown:
            raise UnknownDevice(
                f"unknown device id(s) {unknown}; this plugin advertises PCI addresses {sorted(states)}"
            )
        unhealthy = [i for i in ids if i in states and not states[i].healthy]
        waiting = [i for i in unhealthy if transient.get(i) is not None and transient[i] == states[i].reason]
        sick = [f"{i} ({states[i].reason})" for i in unhealthy if i not in waiting]
        if sick:
            raise DeviceUnhealthy(f"GPU(s) unhealthy: {', '.join(sick)}")
        if waiting and not admitting:
            raise DeviceReleasing(
                "GPU(s) still being released: "
                + ", ".join(f"{i} ({states[i].reason})" for i in waiting)
                + "; the container starts once that is over"
            )
        for i in waiting:
            logger.info(
                "node=%s gpu=%s allocated while %s: the container starts once that is over "
                "(PreStartContainer waits for it)",
                self.node,
                i,
                states[i].reason,
            )

    def allocate(self, device_ids: Sequence[str]) -> ContainerAllocation:
        ids = tuple(sorted(dict.fromkeys(device_ids)))
        try:
            self._check(ids, admitting=True)
        except (InvalidRequest, DeviceUnhealthy) as exc:
            self.metrics.allocate_failures.labels(self.node, type(exc).__name__).inc()
            raise
        shape = shape_of(ids, self.physical_map)
        holder = holder_for(ids)
        if len(ids) > 1 and not shape.nvlink:
            logger.warning(
                "node=%s holder=%s %d GPUs %s (physical %s) form no NVLink partition: allocated without NVLink",
                self.node,
                holder,
                len(ids),
                list(ids),
                list(shape.physical_ids),
            )
        activation = None
        try:
            activation = self._activate(holder, ids)
        except FabricUnavailable as exc:
            if self.settings.fabric_required:
                self.metrics.allocate_failures.labels(self.node, "fabric-unavailable").inc()
                raise FabricUnavailable(f"cannot activate the NVLink partition for {list(ids)}: {exc}") from exc
            logger.warning(
                "node=%s holder=%s fabric service unavailable (%s): allocated WITHOUT partition "
                "activation (fabric_required=false)",
                self.node,
                holder,
                exc,
            )
        except Exception as exc:
            self.metrics.allocate_failures.labels(self.node, type(exc).__name__).inc()
            raise
        nvlink = activation.nvlink if activation is not None else False
        self.metrics.allocations.labels(self.node, "true" if nvlink else "false").inc()
        envs = {
            "GPUCAAS_GPU_PCI_ADDRESSES": ",".join(ids),
            "GPUCAAS_NVLINK": "true" if nvlink else "false",
        }
        if activation is not None:
            envs["GPUCAAS_FABRIC_PARTITIONS"] = ",".join(str(p) for p in activation.partition_ids)
        annotations = {"gpucaas.dev/fabric-holder": holder}
        logger.info(
            "node=%s holder=%s allocated %s physical=%s partitions=%s nvlink=%s",
            self.node,
            holder,
            list(ids),
            list(shape.physical_ids),
            list(activation.partition_ids) if activation else None,
            nvlink,
        )
        for listener in list(self._allocation_listeners):
            try:
                listener(ids)
            except Exception:  # a broken listener must not fail the kubelet's Allocate
                logger.exception("node=%s allocation listener %r failed", self.node, listener)
        return ContainerAllocation(
            device_ids=ids,
            cdi_devices=tuple(qualified_name(self.settings.cdi_kind, i) for i in ids),
            envs=envs,
            annotations=annotations,
            shape=shape,
            activation=activation,
        )

    def _activate(self, holder: str, ids: Sequence[str]) -> Activation:
        """Activate, resolving conflicts with partitions left by pods that are gone.

        The kubelet only hands a pod GPUs that no live pod holds, so an activation that
        overlaps the requested GPUs and whose holder PodResources no longer lists was
        left by a pod that just ended (the periodic sync spares it for
        ``fabric_sync_grace``): it is released now. A conflict that remains (the old pod
        still being torn down) is retried with back-off for at most
        ``allocate_conflict_wait`` seconds before Allocate fails with ABORTED. A fabric
        service that does not answer (restarting) is waited for, ``allocate_fabric_wait``
        seconds at most, before Allocate fails with UNAVAILABLE.
        """
        deadline = time.monotonic() + self.settings.allocate_conflict_wait
        reachable_by = time.monotonic() + self.settings.allocate_fabric_wait
        conflicts, unreachable = Backoff(initial_s=0.1, max_s=1.0), Backoff(initial_s=0.1, max_s=1.0)
        while True:
            try:
                return self.fabric.activate(holder, ids)
            except FabricUnavailable as exc:
                # The fabric service restarting (a crash, an upgrade of its DaemonSet): wait for it.
                # The kubelet waits for Allocate without a deadline but never retries one that
                # failed: the pod would fail for good (UnexpectedAdmissionError).
                if not self.settings.fabric_required or time.monotonic() >= reachable_by:
                    raise
                logger.warning(
                    "node=%s holder=%s fabric service unreachable (%s): retrying the activation for up to %.0fs more",
                    self.node,
                    holder,
                    exc,
                    reachable_by - time.monotonic(),
                )
                if self._stop.wait(min(unreachable.next(), max(0.0, reachable_by - time.monotonic()))):
                    raise
            except ActivationConflict as exc:
                if self.on_conflict is None or time.monotonic() >= deadline:
                    raise
                logger.info(
                    "node=%s holder=%s activation conflict (%s): syncing live holders and retrying",
                    self.node,
                    holder,
                    exc,
                )
                if not self._release_stale(holder, ids, str(exc)):
                    self._stop.wait(min(conflicts.next(), max(0.0, deadline - time.monotonic())))

    def _release_stale(self, holder: str, ids: Sequence[str], conflict: str) -> bool:
        """Sync live holders, then release the conflicting holders that hold requested GPUs
        but no live pod; True when one was released (retry at once)."""
        try:
            self.on_conflict()  # type: ignore[misc]
        except Exception:  # the retry reports the real outcome
            logger.exception("node=%s live-holder sync after conflict failed", self.node)
        if self.live_holders is None:
            return False
        try:
            live = self.live_holders()
        except Exception:  # without the live set nothing is released
            logger.exception("node=%s live holders unknown", self.node)
            return False
        wanted = set(ids)
        released = False
        for other in sorted(set(_HOLDER.findall(conflict))):
            if other == holder or other in live:
                continue
            if not wanted & set(other.removeprefix("gpus:").split("+")):
                continue
            logger.warning(
                "node=%s holder=%s releasing %s: it holds requested GPUs but no live pod "
                "(left by a pod that just ended)",
                self.node,
                holder,
                other,
            )
            try:
                self.fabric.release(other)
                released = True
            except DevicePluginError as exc:
                logger.warning("node=%s release of stale holder %s failed: %s", self.node, other, exc)
        return released

    def pre_start(self, device_ids: Sequence[str]) -> None:
        self._check(tuple(device_ids))

    # --- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        self.refresh()
        self._stop.clear()
        self._threads = [
            threading.Thread(
                target=self._loop,
                args=(self.refresh_devices, self.settings.health_interval),
                name="dp-device-watch",
                daemon=True,
            ),
            threading.Thread(
                target=self._loop,
                args=(self.refresh_fabric, self.settings.fabric_poll_interval),
                name="dp-fabric-watch",
                daemon=True,
            ),
        ]
        for t in self._threads:
            t.start()

    def _loop(self, step: Callable[[], None], interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                step()
            except Exception:  # a watcher never dies
                logger.exception("node=%s watcher %s failed; retrying", self.node, step.__name__)

    def stop(self) -> None:
        self._stop.set()
        with self._changed:
            self._changed.notify_all()
        for t in self._threads:
            t.join(timeout=10)
        self._threads = []

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()
