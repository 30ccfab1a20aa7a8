"""Wiring of one node's fabric service: records, Fabric Manager, service VM, local API, publisher.

:class:`FabricNode` is what ``gpucaas fabric`` runs (and what the tests and the
benchmark start): it builds the parts from :class:`FabricSettings`, starts them
in order and stops them in reverse. Nothing here decides anything; the rules
live in ``partitions`` (allocations), ``service_vm`` (VM lifecycle) and
``bookkeeping`` (records).

Start order: records (node lock) -> service VM (define or reuse, start) ->
Fabric Manager (connect, reconcile: replays after a restart) -> local API ->
VM watcher -> reconcile loop -> FabricState publisher.

Two kinds of restart, told apart (docs/fabric-manager.md):

* Fabric Manager's process restarts inside a running service VM: NVSwitch state
  survives; FM (restart mode) waits for the activated list; the reconcile loop
  sees ``NotReady`` and replays the records (resiliency).
* The service VM restarts (crash, then restart by the watcher) or is booted
  while records exist: the managed NVSwitch hostdevs were reset through vfio, so
  every partition active before is gone and running tenant VMs lost NVLink. This
  is a *fabric reset*: the records are marked lost, FM is told nothing is active,
  the publisher raises a Kubernetes Event and ``NVLinkFabricIntact=False`` on
  FabricState and on the holders' GPU leases, and ``fabric_reset_policy`` flags or
  evicts the pods. New pods get fresh partitions.

With the simulator backend the simulator stands for "Fabric Manager inside the
VM" (real Fabric Manager cannot run in the test VM here), so ``simulate_fm_in_vm``
makes a VM (re)boot restart the simulator: in restart mode after the first boot,
as the VM's ``FABRIC_MODE_RESTART`` is set then.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from core import fabric_messages as fm
from core.platforms import PLATFORMS, LayoutError, PlatformLayout, cross_check_sysfs, load_layout
from services.fabric.bookkeeping import ActivationStore
from services.fabric.discovery import discover_fabric_devices
from services.fabric.domain_xml import DomainSpec
from services.fabric.errors import FabricServiceError
from services.fabric.fabric_manager.interface import FabricManager
from services.fabric.partitions import PartitionService
from services.fabric.publisher import FabricStatePublisher, build_fabric_state_status
from services.fabric.server import UnixServer, create_app
from services.fabric.service_vm import BackoffPolicy, ServiceVM
from services.fabric.settings import FabricSettings

log = logging.getLogger(__name__)


def domain_spec(settings: FabricSettings, hostdevs: tuple[str, ...]) -> DomainSpec:
    return DomainSpec(
        name=settings.domain_name,
        domain_type=settings.domain_type,
        vcpus=settings.vcpus,
        memory_mib=settings.memory_mib,
        hostdevs=hostdevs,
        disk_image=str(settings.disk_image) if settings.disk_image else None,
        kernel=str(settings.kernel) if settings.kernel else None,
        initrd=str(settings.initrd) if settings.initrd else None,
        cmdline=settings.kernel_cmdline,
        fm_channel=settings.fm_channel,
        fm_network=settings.fm_network,
        fm_channel_socket=str(settings.fm_channel_socket),
        node=settings.node_name,
        serial_log=str(settings.console_log) if settings.console_log else None,
    )


def passthrough_devices(settings: FabricSettings) -> tuple[str, ...]:
    """The NVSwitches + memory controller to pass (discovered or configured); () when disabled."""
    if not settings.passthrough:
        return ()
    found = discover_fabric_devices(
        settings.sysfs_root, nvswitches=settings.nvswitch_addresses, memory_controller=settings.memory_controller
    )
    log.info(
        "service VM gets NVSwitches %s and memory controller %s (IOMMU groups %s%s)",
        [d.bdf for d in found.nvswitches],
        found.memory_controller.bdf if found.memory_controller else None,
        sorted(found.iommu_groups),
        ", shared" if found.shared_iommu_group else "",
    )
    return tuple(d.bdf for d in found.passthrough)


def make_fabric_manager(settings: FabricSettings) -> FabricManager:
    from services.fabric.fabric_manager.factory import make_fabric_manager as factory

    unix = settings.fm_channel == "unix"
    return factory(
        backend=settings.fm_backend,
        library=settings.fm_library,
        address=str(settings.fm_channel_socket) if unix else settings.fm_address,
        unix_socket=unix,
        # fmConnect's own timeout; each later call is bounded by fm_call_deadline_s.
        timeout_ms=int(min(settings.fm_connect_timeout_s, settings.fm_call_deadline_s) * 1000),
        board=settings.board,
        h100=settings.simulator_h100,
        deadline_s=settings.fm_call_deadline_s,
        connect_params_version=settings.fm_connect_params_version,
    )


def missing_library_error(backend: str | None, library: str | Path | None) -> str | None:
    """The one-line start-up error when the nvfm backend (the default) has no libnvfm, else None."""
    if (backend or "nvfm") != "nvfm":
        return None
    from services.fabric.fabric_manager.factory import missing_library_message
    from services.fabric.fabric_manager.nvfm import find_libnvfm

    return missing_library_message(library) if find_libnvfm(library) is None else None


def resolve_layout(settings: FabricSettings) -> PlatformLayout | None:
    """The host's physical id -> PCI layout: the configured one (name or file), else the
    simulator's board, else the shipped layout sysfs matches; None when nothing matches."""
    if settings.platform:
        return load_layout(settings.platform)
    if settings.board is not None:
        return load_layout(settings.board)
    for layout in PLATFORMS.values():
        if not cross_check_sysfs(layout, settings.sysfs_root):
            log.info("platform layout %s matches sysfs under %s", layout.name, settings.sysfs_root)
            return layout
    return None


def sysfs_gpu_reset(settings: FabricSettings) -> Any:
    """The GPU reset hook of the partition service (``core.gpu_reset``), or None."""
    if not settings.gpu_reset:
        return None
    from core.gpu_reset import reset_gpus

    return lambda bdfs: reset_gpus(settings.sysfs_root, list(bdfs))


class FabricNode:
    """One node's fabric service, assembled from settings."""

    def __init__(
        self,
        settings: FabricSettings,
        *,
        fm: FabricManager | None = None,
        template: str | None = None,
        kube_client: Any = None,
    ) -> None:
        self.settings = settings
        self._fm_injected = fm is not None
        self.fm = fm if fm is not None else make_fabric_manager(settings)
        self.store = ActivationStore(settings.state_dir)
        try:
            self.layout = resolve_layout(settings)
        except LayoutError as exc:
            raise FabricServiceError(str(exc)) from exc
        self.service = PartitionService(
            self.fm, self.store, layout=self.layout, gpu_reset=sysfs_gpu_reset(settings), sysfs_root=settings.sysfs_root
        )
        self.fabric_resets = 0
        self.last_reset_report: dict[str, list[str]] | None = None
        self.vm: ServiceVM | None = None
        self._template = template
        self._kube_client = kube_client
        self.publisher: FabricStatePublisher | None = None
        self.server: UnixServer | None = None
        self._stop = threading.Event()
        self._reconciler: threading.Thread | None = None
        self.vm_restart_replays = 0
        self._stopped = False
        self._unreported: set[str] = set()  # lost holders Kubernetes has not been told about yet
        self._report_lock = threading.Lock()  # the VM watcher and the reconcile loop both report

    # --- parts ----------------------------------------------------------------------
    def _template_text(self) -> str:
        if self._template is not None:
            return self._template
        if self.settings.domain_template is not None:
            return Path(self.settings.domain_template).read_text()
        from vm_images.domain import template_text

        return template_text()

    @property
    def _booted_marker(self) -> Path:
        return self.settings.state_dir / "service-vm-booted"

    def _mark_first_boot(self) -> None:
        """After the VM's first boot since the host booted, later boots start FM in restart mode."""
        assert self.vm is not None
        if not self._booted_marker.exists():
            self._booted_marker.write_text("1\n")
        if not self.vm.spec.fm_restart:
            self.vm.set_spec(replace(self.vm.spec, fm_restart=True), self._template_text())

    def build_vm(self) -> ServiceVM:
        s = self.settings
        spec = replace(domain_spec(s, passthrough_devices(s)), fm_restart=self._booted_marker.exists())
        return ServiceVM(
            s.libvirt_uri,
            spec,
            self._template_text(),
            watch_interval_s=s.watch_interval_s,
            backoff=BackoffPolicy(
                initial_s=s.restart_backoff_initial_s, max_s=s.restart_backoff_max_s, stable_s=s.restart_stable_s
            ),
            stop_timeout_s=s.stop_timeout_s,
            on_restarted=self._vm_restarted,
            use_events=s.vm_events,
        )

    def _vm_restarted(self) -> None:
        """The watcher restarted the service VM: a fabric reset (NVSwitches reset by vfio)."""
        self._fabric_reset("service VM restarted (NVSwitches reset)")
        ids = self._fabric_fresh()
        if ids is None:
            raise FabricServiceError("Fabric Manager did not come back after the VM restart")
        self.vm_restart_replays += 1
        log.warning("service VM restart handled: fabric reset, Fabric Manager told partitions %s", ids)

    def _fabric_reset(self, reason: str) -> None:
        lost = self.service.fabric_reset(reason)
        self.fabric_resets += 1
        self._unreported |= {a.holder for a in lost}
        self._report_lost()

    def _report_lost(self) -> None:
        """Tell Kubernetes about lost holders not reported yet (retried from the reconcile
        loop until the API takes it: nothing keeps running on a broken fabric unseen)."""
        with self._report_lock:
            if self.publisher is None or not self._unreported:
                return
            views = [v for v in self.service.lost() if v["holder"] in self._unreported]
            self._unreported &= {v["holder"] for v in views}  # released meanwhile: nothing to tell
            if not views:
                return
            self.last_reset_report = self.publisher.report_fabric_reset(views, self.settings.fabric_reset_policy)
            self._unreported -= set(self.last_reset_report.get("reported", []))

    def _fabric_fresh(self) -> list[int] | None:
        """The service VM was (re)booted: reconnect to its Fabric Manager and replay the records.

        With the simulator backend and ``simulate_fm_in_vm`` the simulator is
        restarted first: it plays the Fabric Manager that booted with the VM.
        Returns the replayed ids, or None when Fabric Manager did not come up in
        time (the reconcile loop replays once it does).
        """
        if self.settings.simulate_fm_in_vm and getattr(self.fm, "backend", "") == "simulator":
            # FABRIC_MODE_RESTART is set for every boot after the first (see _mark_first_boot).
            restart_mode = bool(self.vm is not None and self.vm.spec.fm_restart)
            self.fm.fabric.restart(restart_mode=restart_mode)  # type: ignore[attr-defined]
        try:
            return self.service.fabric_restarted(self.settings.fm_connect_timeout_s)
        except FabricServiceError as exc:
            log.error("after the service VM boot: %s", exc)
            return None

    def vm_state(self) -> fm.ServiceVMState:
        if self.vm is None:
            return {"state": "unmanaged", "restarts": 0}
        return self.vm.state()

    def collect_status(self) -> dict[str, Any]:
        fm_state = {"reachable": False, "backend": self.service.backend, "message": ""}
        partitions = gpus = switches = None
        try:
            partitions = self.service.list_partitions()
            gpus = self.service.topology()["gpus"]
            failed = self.service.failed_devices()
            switches = [
                {"pci_bus_id": d.pci_bus_id, "reason": f"NVLink failure on ports {list(d.ports)}"}
                for d in failed.switches
            ]
            fm_state["reachable"] = True
        except Exception as exc:  # noqa: BLE001 - the Fabric Manager's failure is the status's message
            fm_state["message"] = str(exc)
        return build_fabric_state_status(
            partitions=partitions,
            gpus=gpus,
            failed_switches=switches,
            service_vm=self.vm_state(),
            fabric_manager=fm_state,
            lost=self.service.lost(),
            last_fabric_reset_at=self.service.status.last_fabric_reset_at,
        )

    # --- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        s = self.settings
        if not self._fm_injected:
            problem = missing_library_error(s.fm_backend, s.fm_library)
            if problem:
                raise FabricServiceError(problem)
        log.info("fabric service starting on node %s: %s", s.node_name, s.redacted())
        if self.layout is None:
            log.error(
                "no GPU layout: set GPUCAAS_FABRIC_PLATFORM (%s or a file); on H100 Fabric Manager "
                "gives no PCI bus ids, so GPUs cannot be matched",
                ", ".join(PLATFORMS),
            )
        else:
            for problem in cross_check_sysfs(self.layout, s.sysfs_root):
                log.error("platform layout %s vs sysfs: %s", self.layout.name, problem)
        self._stopped = False
        self.store.open()
        if self.store.discarded_stale:
            self._booted_marker.unlink(missing_ok=True)  # the node rebooted: FM starts fresh
        try:
            booted = False
            if s.vm_enabled:
                self.vm = self.build_vm()
                booted = self.vm.start()
                self._mark_first_boot()
            if booted:
                if len(self.store.book):
                    # The VM was down: its boot reset the NVSwitches, whatever the records say.
                    self._fabric_reset("service VM booted while partitions were recorded (NVSwitches reset)")
                self._fabric_fresh()
            elif not self.service.reconcile()["reachable"]:
                log.warning("Fabric Manager not reachable yet; partitions wait for it")
            try:
                self.service.validate_layout()
            except FabricServiceError as exc:
                log.warning("layout not validated against Fabric Manager yet: %s", exc)
            self.server = UnixServer(
                create_app(self.service, self.vm_state, default_grace_s=s.release_grace_s), s.socket, s.socket_mode
            )
            self.server.start()
            if self.vm is not None:
                self.vm.start_watch()
            self._stop.clear()
            self._reconciler = threading.Thread(target=self._reconcile_loop, name="fabric-reconcile", daemon=True)
            self._reconciler.start()
            if s.publish:
                self.publisher = FabricStatePublisher(
                    self._kube(), s.node_name, self.collect_status, interval_s=s.publish_interval_s
                )
                self.service.add_listener(self.publisher.notify)
                self.publisher.start()
                self._report_lost()
        except BaseException:
            self.stop()
            raise
        log.info("fabric service ready on %s", s.socket)

    def _kube(self) -> Any:
        if self._kube_client is not None:
            return self._kube_client
        from core.kube import KubeConnection, connect

        # A kubeconfig when given, else the in-cluster ServiceAccount (the core adapter decides);
        # its light path: a few calls do not need the official client's models in this daemon.
        return connect(KubeConnection(kubeconfig=self.settings.kubeconfig))

    def _reconcile_loop(self) -> None:
        while not self._stop.wait(self.settings.reconcile_interval_s):
            try:
                self._report_lost()
            except Exception:
                log.exception("reporting the fabric reset failed")
            try:
                self.service.reconcile()
            except FabricServiceError as exc:
                log.warning("reconcile: %s", exc)
            except Exception:
                log.exception("reconcile failed")

    def stop(self) -> None:
        """Stop everything started; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self._stop.set()
        if self.publisher is not None:
            self.publisher.stop()
        if self.vm is not None:
            self.vm.stop_watch()
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self._reconciler is not None:
            self._reconciler.join(timeout=15)
            self._reconciler = None
        if self.vm is not None:
            try:
                if self.settings.stop_vm_on_exit:
                    self.vm.stop()
            finally:
                self.vm.close()
        self.fm.close()
        self.store.close()
        log.info("fabric service stopped")

    def __enter__(self) -> FabricNode:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run(settings: FabricSettings) -> None:
    """Run the node's fabric service until SIGTERM/SIGINT; a failed start raises FabricServiceError."""
    import gc

    from core.stop_signals import on_stop_signal

    stop = threading.Event()
    on_stop_signal(stop.set)
    node = FabricNode(settings)
    node.start()
    gc.freeze()  # what start-up built lives as long as the process: no full collection rescans it
    try:
        stop.wait()
    finally:
        node.stop()
