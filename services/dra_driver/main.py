"""The DRA kubelet plugin of one node, built from its settings, started and stopped in order.

The process entry (``gpucaas dra-driver``) is ``gpucaas/dra_node.py``: it runs this
driver and, beside it, the GPU-lease node agent (``services/gpu_leases``).

Parts (each in its own module): the kubelet-facing gRPC server (registration, Prepare/
Unprepare, health), the slice publisher, and, with binding conditions on, the binding
watcher. When no device plugin runs on the node (``cdi_dir`` set), the driver keeps the
node's CDI spec itself, with the device plugin's builder (:mod:`core.cdi`) over the
vfio GPUs found in sysfs, so the CDI ids Prepare answers resolve. One background loop
re-derives what the node offers from the fabric service
(physical id <-> PCI, GPU health) and the node's GPU leases, updates the health streams,
republishes the slices when they changed and keeps the node's GPU count in its status
capacity (:mod:`.capacity`); another runs the binding rounds.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from core import lease_states as states, vfio_sysfs
from core.cdi import CDISpecError, SpecWriter, qualified_name
from core.fabric_client import FabricClient, FabricUnavailable
from core.kube import Kube, KubeConnection, KubeError
from core.lease_store import LeaseStore
from core.metrics_server import MetricsServer
from services.dra_driver.binding import BindingWatcher, run_round
from services.dra_driver.capacity import CapacityAdvertiser
from services.dra_driver.checkpoint import Checkpoint, PreparedClaim
from services.dra_driver.driver import Driver
from services.dra_driver.metrics import Metrics
from services.dra_driver.publisher import SlicePublisher, gpus_from
from services.dra_driver.server import DraServer, HealthBoard
from services.dra_driver.settings import DraDriverSettings
from services.dra_driver.slices import PublishedGpu

log = logging.getLogger(__name__)


@dataclass
class DraDriverNode:
    settings: DraDriverSettings
    kube: Kube
    fabric: FabricClient
    checkpoint: Checkpoint
    server: DraServer
    publisher: SlicePublisher
    binding: BindingWatcher | None
    board: HealthBoard
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _pci: dict[int, str] = field(default_factory=dict)
    _publish_now: threading.Event = field(default_factory=threading.Event)
    cdi: SpecWriter | None = None
    driver: Driver | None = None
    metrics: Metrics | None = None
    metrics_server: MetricsServer | None = None  # /metrics, once started
    capacity: CapacityAdvertiser | None = None  # advertise_gpus

    def physical_to_pci(self) -> dict[int, str]:
        """Physical GPU id -> PCI address (discovered once, refreshed by each publish round)."""
        if not self._pci:
            self.discover()
        return self._pci

    def write_cdi_spec(self) -> None:
        """The CDI spec of the node's vfio GPUs (only when the driver owns it)."""
        if self.cdi is None:
            return
        inventory = vfio_sysfs.scan(self.settings.sysfs_root, self.settings.dev_root)
        try:
            self.cdi.update(inventory.gpus)
        except (CDISpecError, OSError) as exc:
            log.error("cannot write the CDI spec %s: %s", self.cdi.path, exc)

    def discover(self) -> list[PublishedGpu]:
        """What the node offers now; the PCI map and health board are refreshed on the way.

        The fabric service's partitions say which GPUs a holder other than a claim keeps
        busy (an admin's activation, another allocation path): every partition overlapping
        one is held out of the slice, since the fabric service would refuse to activate it
        and the scheduler, first fit, would pick it again after each refusal. Such a GPU is
        not unhealthy: the health board does not change for it."""
        try:
            topology = self.fabric.topology()
            partitions = self.fabric.partitions()
        except FabricUnavailable:
            if self.metrics is not None:
                self.metrics.discovered(reachable=False)
            raise
        leases = LeaseStore(self.kube).list(self.settings.node_name)
        gpus = gpus_from(topology, leases, partitions)
        if self.metrics is not None:
            allocatable = sum(1 for g in gpus if g.allocatable)
            self.metrics.discovered(reachable=True, allocatable=allocatable, withheld=len(gpus) - allocatable)
            self.metrics.prepared_claims.labels(self.settings.node_name).set(len(self.checkpoint.all()))
        self._pci = {g.physical_id: g.pci_bus_id for g in gpus}
        self.board.update(
            {g.physical_id: (g.allocatable, "" if g.allocatable else "not free or unhealthy") for g in gpus}
        )
        return gpus

    def publish_once(self) -> None:
        self.write_cdi_spec()
        try:
            self.publisher.publish()
        except (KubeError, FabricUnavailable) as exc:
            log.warning("could not publish the slices of %s: %s", self.settings.node_name, exc)
        if self.capacity is not None and self._pci:  # every GPU the node has, as a device plugin counts them
            self.capacity.keep(len(self._pci))

    def request_publish(self) -> None:
        """Re-derive and publish the slices now instead of at the end of the interval (the
        binding watcher saw the fabric refuse a partition: a holder other than a claim may
        have come, and its partitions must leave the slice before the scheduler retries)."""
        self._publish_now.set()

    def start(self) -> None:
        self.write_cdi_spec()  # before registering: Prepare answers CDI ids of this spec
        self.server.start()
        if self.metrics is not None and self.settings.metrics_port >= 0:
            self.metrics_server = MetricsServer(self.settings.metrics_port, self.metrics.registry)
            log.info("node=%s metrics on :%d/metrics", self.settings.node_name, self.metrics_server.port)
        self.publish_once()
        self._loop("publish", self.settings.publish_interval_s, self.publish_once, wake=self._publish_now)
        if self.binding is not None:
            binding = self.binding
            self._loop("binding", self.settings.binding_interval_s, lambda: run_round(binding))

    def _loop(
        self, name: str, interval: float, step: Callable[[], object], wake: threading.Event | None = None
    ) -> None:
        def run() -> None:
            while True:
                if wake is None:
                    if self._stop.wait(interval):
                        return
                else:
                    wake.wait(interval)
                    wake.clear()
                    if self._stop.is_set():
                        return
                step()

        t = threading.Thread(target=run, name=f"dra-{name}", daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        self._publish_now.set()
        for t in self._threads:
            t.join(timeout=5)
        self.server.stop()
        if self.metrics_server is not None:
            self.metrics_server.close()
            self.metrics_server = None
        self.fabric.close()
        self.kube.close()


def lease_refusal(kube: Kube, node_name: str) -> Callable[[tuple[str, ...], str, str], str | None]:
    """Why GPUs may not be prepared for a pod now, from the node's GPU leases (none: no refusal)."""

    def refuse(addresses: tuple[str, ...], namespace: str, pod: str) -> str | None:
        leases = {lz["spec"]["pciAddress"]: lz for lz in LeaseStore(kube).list(node_name)}
        for bdf in addresses:
            lease = leases.get(bdf)
            if lease is None:
                continue
            state = states.state_of(lease.get("status"))
            if state not in states.ALLOCATABLE_STATES:
                return f"GPU {bdf} is {state} (GPU lease {lease['metadata']['name']}); waiting until it is Free"
            holder = (lease.get("status") or {}).get("holder") or {}
            if state is states.LeaseState.LEASED and (holder.get("namespace"), holder.get("pod")) != (namespace, pod):
                return f"GPU {bdf} is still leased to {holder.get('namespace')}/{holder.get('pod')}"
        return None

    return refuse


#: Event reason on the pod when its claim's NVLink partition was activated (the API's
#: container timeline shows it as ``partition-activated``).
ACTIVATED_REASON = "PartitionActivated"


def activation_event(kube: Kube, node_name: str) -> Callable[[PreparedClaim], None]:
    """Post a core/v1 Event on the claim's pod once its partition is active.

    The kubelet records nothing per device for DRA (it posts no event on a successful
    NodePrepareResources), so the driver says when the GPUs were handed over: the moment a
    tenant's container got its partition, in ``kubectl describe pod`` and the API's timeline.
    Best effort: an Event that cannot be written is logged, never fails the Prepare.
    """

    def announce(claim: PreparedClaim) -> None:
        if not claim.pod:
            return
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        partitions = ", ".join(d.device_name for d in claim.devices)
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{claim.pod}.gpucaas-dra-", "namespace": claim.namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": claim.pod, "namespace": claim.namespace},
            "reason": ACTIVATED_REASON,
            "type": "Normal",
            "count": 1,
            "message": (
                f"{len(claim.pci_addresses)} GPU(s) allocated on {node_name}: "
                f"{', '.join(claim.pci_addresses)} (claim {claim.name}, partition {partitions})"
            )[:1024],
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": "gpucaas-dra-driver", "host": node_name},
            "reportingComponent": "gpucaas-dra-driver",
            "reportingInstance": node_name,
        }
        try:
            kube.request("POST", f"/api/v1/namespaces/{claim.namespace}/events", body=body)
        except KubeError as exc:
            log.info("event for %s/%s not recorded: %s", claim.namespace, claim.pod, exc.summary())

    return announce


def build(settings: DraDriverSettings, *, kube: Kube | None = None) -> DraDriverNode:
    kube = kube or Kube(KubeConnection(kubeconfig=settings.kubeconfig))
    fabric = FabricClient(settings.fabric_socket)
    checkpoint = Checkpoint(settings.state_dir / "checkpoint.json")
    board = HealthBoard()
    holder: dict[str, DraDriverNode] = {}
    driver = Driver(
        node_name=settings.node_name,
        checkpoint=checkpoint,
        fabric=fabric,
        read_claim=lambda ns, name: cast(
            "dict[str, Any]",
            kube.call(  # the custom-objects API answers plain JSON
                kube.custom.get_namespaced_custom_object,
                "resource.k8s.io",
                "v1",
                ns,
                "resourceclaims",
                name,
                idempotent=True,
                what=f"read ResourceClaim {ns}/{name}",
            ),
        ),
        physical_to_pci=lambda: holder["node"].physical_to_pci(),
        cdi_id=lambda bdf: qualified_name(settings.cdi_kind, bdf),
    )
    server = DraServer(driver, board, registry_dir=settings.registry_dir, plugins_dir=settings.plugins_dir)
    node = DraDriverNode(settings, kube, fabric, checkpoint, server, None, None, board)  # type: ignore[arg-type]
    holder["node"] = node
    node.driver = driver
    node.metrics = Metrics(settings.node_name)
    driver.gpu_refusal = lease_refusal(kube, settings.node_name)
    driver.activated_listeners.append(activation_event(kube, settings.node_name))
    driver.refused_listeners.append(node.request_publish)
    if settings.cdi_dir is not None:
        node.cdi = SpecWriter(settings.cdi_dir, settings.cdi_kind, settings.dev_root)
    node.publisher = SlicePublisher(
        kube, settings.node_name, node.discover, binding_conditions=settings.binding_conditions
    )
    if settings.advertise_gpus:
        node.capacity = CapacityAdvertiser(kube, settings.node_name)
    if settings.binding_conditions:
        node.binding = BindingWatcher(kube, fabric, checkpoint, settings.node_name, on_refused=node.request_publish)
    return node
