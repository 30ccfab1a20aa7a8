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
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from core.crds import API_VERSION, FABRICSTATE_PLURAL, GROUP, VERSION

log = logging.getLogger(__name__)


def build_fabric_state_status(
    *,
    partitions: Sequence[Mapping[str, Any]] | None,
    gpus: Sequence[Mapping[str, Any]] | None,
    failed_switches: list[dict[str, Any]] | None = None,
    service_vm: Mapping[str, Any],
    fabric_manager: dict[str, Any],
    now: datetime | None = None,
    lost: Sequence[Mapping[str, Any]] | None = None,
    last_fabric_reset_at: datetime | None = None,
) -> dict[str, Any]:
    """The FabricState ``status`` (camelCase wire form). ``partitions``/``gpus`` None: FM unreachable."""
    parts = partitions or []
    status: dict[str, Any] = {
        "updatedAt": (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "activePartitionIds": ",".join(str(p["id"]) for p in parts if p["active"]),
        "serviceVM": {
            k: v
            for k, v in {
                "state": str(service_vm.get("state", "unknown")),
                "domain": service_vm.get("domain"),
                "restarts": int(service_vm.get("restarts", 0)),
                "message": service_vm.get("message") or None,
            }.items()
            if v is not None
        },
        "fabricManager": {
            k: v
            for k, v in {
                "reachable": bool(fabric_manager.get("reachable", False)),
                "backend": str(fabric_manager.get("backend", "")),
                "message": fabric_manager.get("message") or None,
            }.items()
            if v is not None
        },
    }
    if partitions is not None:
        status["partitions"] = [
            {
                k: v
                for k, v in {
                    "id": p["id"],
                    "gpus": sorted(g["physical_id"] for g in p["gpus"]),
                    "nvlinks": p["nvlinks"],
                    "active": p["active"],
                    "supported": p["supported"],
                    "holder": p.get("holder"),
                }.items()
                if v is not None
            }
            for p in parts
        ]
    if gpus is not None:
        status["gpus"] = [
            {
                k: v
                for k, v in {
                    "physicalId": g["physical_id"],
                    "pciBusId": g["pci_bus_id"],
                    "healthy": g["healthy"],
                    "reason": g.get("reason"),
                }.items()
                if v is not None
            }
            for g in gpus
        ]
        failed = [
            {
                k: v
                for k, v in {
                    "physicalId": g["physical_id"],
                    "pciBusId": g["pci_bus_id"],
                    "kind": "gpu",
                    "reason": g.get("reason") or "NVLink failure",
                }.items()
                if v is not None
            }
            for g in gpus
            if not g["healthy"]
        ]
        failed += [
            {"pciBusId": s["pci_bus_id"], "kind": "nvswitch", "reason": s.get("reason") or "NVLink failure"}
            for s in failed_switches or []
        ]
        status["failedDevices"] = failed
    if lost is not None:
        status["conditions"] = [fabric_intact_condition(lost, last_fabric_reset_at or now)]
        status["lostPartitions"] = [
            {
                k: v
                for k, v in {
                    "holder": a["holder"],
                    "pod": a.get("pod"),
                    "partitionIds": a["partition_ids"],
                    "reason": a.get("lost"),
                    "since": a.get("lost_at"),
                }.items()
                if v is not None
            }
            for a in lost
        ]
    return status


#: Condition type on FabricState and on the GPU leases of pods whose partition was lost.
FABRIC_CONDITION = "NVLinkFabricIntact"
LOST_REASON = "FabricReset"


def _ts(at: datetime | None) -> str:
    return (at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


def fabric_intact_condition(lost: Sequence[Mapping[str, Any]], at: datetime | None) -> dict[str, Any]:
    if not lost:
        return {
            "type": FABRIC_CONDITION,
            "status": "True",
            "reason": "Intact",
            "message": "every recorded partition is active in Fabric Manager",
            "lastTransitionTime": _ts(at),
        }
    who = ", ".join(a.get("pod") or a["holder"] for a in lost)
    return {
        "type": FABRIC_CONDITION,
        "status": "False",
        "reason": LOST_REASON,
        "message": f"the service VM restarted and reset the NVSwitches; NVLink partitions lost by: {who}",
        "lastTransitionTime": _ts(at),
    }


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

    def __init__(
        self,
        api_client: Any,
        node: str,
        collect: Callable[[], dict[str, Any]],
        *,
        interval_s: float = 15.0,
        debounce_s: float = 0.2,
    ) -> None:
        from core.kube import adapter

        self.kube = adapter(api_client)  # the light RestKube in the daemon; any adapter works
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
        from core.kube import Conflict, NotFound

        try:
            self.kube.call(
                self.api.get_cluster_custom_object,
                GROUP,
                VERSION,
                FABRICSTATE_PLURAL,
                self.node,
                what=f"get fabricstate {self.node}",
                idempotent=True,
            )
        except NotFound:
            try:
                self.kube.call(
                    self.api.create_cluster_custom_object,
                    GROUP,
                    VERSION,
                    FABRICSTATE_PLURAL,
                    build_fabric_state(self.node),
                    what=f"create fabricstate {self.node}",
                    idempotent=True,
                )  # a repeated create answers 409: fine
                log.info("created FabricState %s", self.node)
            except Conflict:
                pass

    def publish_once(self) -> dict[str, Any]:
        status = self.collect()
        self.ensure_object()
        self.kube.call(
            self.api.patch_cluster_custom_object_status,
            GROUP,
            VERSION,
            FABRICSTATE_PLURAL,
            self.node,
            {"status": status},
            what=f"patch fabricstate {self.node} status",
            idempotent=True,
        )
        self.published += 1
        self.last_error = None
        return status

    def report_fabric_reset(self, lost: Sequence[Mapping[str, Any]], policy: str) -> dict[str, list[str]]:
        """A fabric reset took the partitions of ``lost`` (activation views): raise an Event on
        FabricState and on each pod, set the ``NVLinkFabricIntact=False`` condition on the pods'
        GPU leases, and per ``policy`` evict the pods ("evict") or leave them flagged ("flag").
        Each step is tried for every holder; failures are logged and returned, never raised.
        ``reported`` lists the holders fully handled (a pod already gone counts as handled);
        the caller retries the others."""

        def gone(exc: Exception) -> bool:
            return getattr(exc, "status", None) == 404

        done: dict[str, list[str]] = {"events": [], "leases": [], "evicted": [], "errors": [], "reported": []}
        who = [a.get("pod") or a["holder"] for a in lost]
        try:
            self._event(
                "default",
                {"apiVersion": API_VERSION, "kind": "FabricState", "name": self.node},
                "FabricReset",
                f"service VM restart reset the NVSwitch fabric on {self.node}; "
                f"partitions lost by {', '.join(who) or 'nobody'}",
                "Warning",
            )
            done["events"].append(f"FabricState/{self.node}")
        except Exception as exc:  # noqa: BLE001 - one failed write is reported, the others still run
            done["errors"].append(f"event on FabricState/{self.node}: {exc}")
        for a in lost:
            errors_before = len(done["errors"])
            pod = a.get("pod")
            if pod and "/" in pod:
                ns, name = pod.split("/", 1)
                msg = (
                    f"NVLink partition(s) {a['partition_ids']} of this pod were lost: the fabric service VM on "
                    f"{self.node} restarted and reset the NVSwitches (policy: {policy})"
                )
                try:
                    self._event(
                        ns,
                        {"apiVersion": "v1", "kind": "Pod", "name": name, "namespace": ns},
                        "NVLinkLost",
                        msg,
                        "Warning",
                    )
                    done["events"].append(pod)
                except Exception as exc:  # noqa: BLE001 - reported in the result, the others still run
                    done["errors"].append(f"event on pod {pod}: {exc}")
            for bdf in a["gpus"]:
                try:
                    if self._flag_lease(bdf, a):
                        done["leases"].append(bdf)
                except Exception as exc:  # noqa: BLE001 - reported in the result, the others still run
                    done["errors"].append(f"lease of {bdf}: {exc}")
            if policy == "evict" and pod and "/" in pod:
                ns, name = pod.split("/", 1)
                try:
                    self.kube.request(
                        "POST",
                        f"/api/v1/namespaces/{ns}/pods/{name}/eviction",
                        body={
                            "apiVersion": "policy/v1",
                            "kind": "Eviction",
                            "metadata": {"name": name, "namespace": ns},
                        },
                    )
                    done["evicted"].append(pod)
                except Exception as exc:  # noqa: BLE001 - reported in the result, the others still run
                    if not gone(exc):
                        done["errors"].append(f"evicting {pod}: {exc}")
            if len(done["errors"]) == errors_before:
                done["reported"].append(a["holder"])
        for e in done["errors"]:
            log.warning("fabric reset report: %s", e)
        self.notify()
        return done

    def _event(self, namespace: str, regarding: dict[str, Any], reason: str, message: str, kind: str) -> None:
        """A core/v1 Event (the wire form the official client's ``CoreV1Event`` serialises to)."""
        now = _ts(None)
        involved = {
            k: v
            for k, v in {
                "apiVersion": regarding["apiVersion"],
                "kind": regarding["kind"],
                "name": regarding["name"],
                "namespace": regarding.get("namespace"),
            }.items()
            if v
        }
        self.kube.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/events",
            body={
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"generateName": f"{regarding['name']}.fabric-", "namespace": namespace},
                "involvedObject": involved,
                "reason": reason,
                "message": message[:1024],
                "type": kind,
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
                "source": {"component": "gpucaas-fabric", "host": self.node},
                "reportingComponent": "gpucaas-fabric",
                "reportingInstance": self.node,
            },
        )

    def _flag_lease(self, bdf: str, lost: Mapping[str, Any]) -> bool:
        """Set NVLinkFabricIntact=False on the GPU's lease (read-modify-replace, retried on conflict)."""
        from core.lease_store import LeaseConflict, LeaseStore, lease_name

        store = LeaseStore(self.kube)
        cond = {
            "type": FABRIC_CONDITION,
            "status": "False",
            "reason": LOST_REASON,
            "message": f"partition(s) {lost['partition_ids']} lost in a fabric reset ({lost.get('lost')})",
            "lastTransitionTime": _ts(None),
        }
        for _ in range(5):
            lease = store.get(lease_name(self.node, bdf))
            if lease is None:
                return False
            status = dict(lease.get("status") or {})
            status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != FABRIC_CONDITION]
            status["conditions"].append(cond)
            try:
                store.write_status(lease, status)
                return True
            except LeaseConflict:
                continue
        raise RuntimeError(f"lease of {bdf} kept changing")

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
            except Exception as exc:  # noqa: BLE001 - Kubernetes down or refusing: retry next round
                # KubeError.summary(): "forbidden: <user> cannot <verb> <resource>" / "Kubernetes unreachable at <url>"
                self.last_error = exc.summary() if hasattr(exc, "summary") else str(exc)
                log.warning("publishing FabricState %s failed: %s", self.node, self.last_error)
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.wait(self.debounce_s):
                break
