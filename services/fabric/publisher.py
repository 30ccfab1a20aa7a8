"""Publish the node's fabric state as the ``FabricState`` custom resource (the Kubernetes adapter).

``build_fabric_state_status`` is the pure builder of the status (partitions with
active/holder, physical id <-> PCI bus id, failed devices, service VM, Fabric
Manager); :class:`FabricStatePublisher` writes it through the official
``kubernetes`` client: the object (cluster-scoped, named after the node) is
created when missing, then its ``status`` subresource is patched. A background
thread republishes on every change (debounced) and at least every
``interval_s``; a Kubernetes outage is logged and retried, never fatal.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gpucaas.core.crds import API_VERSION, FABRICSTATE_PLURAL, GROUP, VERSION

log = logging.getLogger(__name__)


def build_fabric_state_status(
    *,
    partitions: list[dict[str, Any]] | None,
    gpus: list[dict[str, Any]] | None,
    failed_switches: list[dict[str, Any]] | None = None,
    service_vm: dict[str, Any],
    fabric_manager: dict[str, Any],
    now: datetime | None = None,
) -> dict[str, Any]:
    """The FabricState ``status`` (camelCase wire form). ``partitions``/``gpus`` None: FM unreachable."""
    parts = partitions or []
    status: dict[str, Any] = {
        "updatedAt": (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "activePartitionIds": ",".join(str(p["id"]) for p in parts if p["active"]),
        "serviceVM": {k: v for k, v in {
            "state": str(service_vm.get("state", "unknown")),
            "domain": service_vm.get("domain"),
            "restarts": int(service_vm.get("restarts", 0)),
            "message": service_vm.get("message") or None,
        }.items() if v is not None},
        "fabricManager": {k: v for k, v in {
            "reachable": bool(fabric_manager.get("reachable", False)),
            "backend": str(fabric_manager.get("backend", "")),
            "message": fabric_manager.get("message") or None,
        }.items() if v is not None},
    }
    if partitions is not None:
        status["partitions"] = [
            {k: v for k, v in {
                "id": p["id"],
                "gpus": sorted(g["physical_id"] for g in p["gpus"]),
                "nvlinks": p["nvlinks"],
                "active": p["active"],
                "supported": p["supported"],
                "holder": p.get("holder"),
            }.items() if v is not None}
            for p in parts
        ]
    if gpus is not None:
        status["gpus"] = [
            {k: v for k, v in {
                "physicalId": g["physical_id"], "pciBusId": g["pci_bus_id"],
                "healthy": g["healthy"], "reason": g.get("reason"),
            }.items() if v is not None}
            for g in gpus
        ]
        failed = [
            {"physicalId": g["physical_id"], "pciBusId": g["pci_bus_id"], "kind": "gpu",
             "reason": g.get("reason") or "NVLink failure"}
            for g in gpus if not g["healthy"]
        ]
        failed += [
            {"pciBusId": s["pci_bus_id"], "kind": "nvswitch", "reason": s.get("reason") or "NVLink failure"}
            for s in failed_switches or []
        ]
        status["failedDevices"] = failed
    return status


def build_fabric_state(node: str) -> dict[str, Any]:
    """A new FabricState object for ``node`` (status comes separately)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "FabricState",
        "metadata": {"name": node, "labels": {"app.kubernetes.io/managed-by": "gpucaas-fabric"}},
        "spec": {"node": node},
    }


class FabricStatePublisher:
    """Writes FabricState/<node> status; ``collect`` gives the current status dict."""

    def __init__(self, api_client: Any, node: str, collect: Callable[[], dict[str, Any]],
                 *, interval_s: float = 15.0, debounce_s: float = 0.2) -> None:
        from gpucaas.core.kube import Kube

        self.kube = Kube.of(api_client)
        self.api = self.kube.custom
        self.node = node
        self.collect = collect
        self.interval_s = interval_s
        self.debounce_s = debounce_s
        self.published = 0
        self.last_error: str | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def ensure_object(self) -> None:
        from gpucaas.core.kube import Conflict, NotFound

        try:
            self.kube.call(self.api.get_cluster_custom_object, GROUP, VERSION, FABRICSTATE_PLURAL, self.node,
                           what=f"get fabricstate {self.node}", idempotent=True)
        except NotFound:
            try:
                self.kube.call(self.api.create_cluster_custom_object, GROUP, VERSION, FABRICSTATE_PLURAL,
                               build_fabric_state(self.node), what=f"create fabricstate {self.node}",
                               idempotent=True)  # a repeated create answers 409: fine
                log.info("created FabricState %s", self.node)
            except Conflict:
                pass

    def publish_once(self) -> dict[str, Any]:
        status = self.collect()
        self.ensure_object()
        self.kube.call(self.api.patch_cluster_custom_object_status, GROUP, VERSION, FABRICSTATE_PLURAL, self.node,
                       {"status": status}, what=f"patch fabricstate {self.node} status", idempotent=True)
        self.published += 1
        self.last_error = None
        return status

    def notify(self) -> None:
        """Something changed: publish soon."""
        self._wake.set()

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="fabricstate-publisher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.publish_once()
            except Exception as exc:  # Kubernetes down or refusing: retry next round
                # KubeError.summary(): "forbidden: <user> cannot <verb> <resource>" / "Kubernetes unreachable at <url>"
                self.last_error = exc.summary() if hasattr(exc, "summary") else str(exc)
                log.warning("publishing FabricState %s failed: %s", self.node, self.last_error)
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.wait(self.debounce_s):
                break
