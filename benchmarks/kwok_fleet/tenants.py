"""The tenants' side of a fleet run: each pod created at its arrival time (the tenant API's own
pod, ``services.api.domain.pods.build_pod``, 1/2/4/8 GPUs), deleted once it has run its trace duration,
and the pods' watch (``benchmarks.kit.watch``) that sees each one bound, Running and gone and
tells the node side of each bind."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from benchmarks.kit.watch import Watch, pods_path
from benchmarks.kwok_fleet.context import RunContext
from benchmarks.kwok_fleet.node_objects import NAMESPACE, TENANCY
from benchmarks.kwok_fleet.node_side import NodeSide
from benchmarks.kwok_fleet.pod_record import PodRecord
from core import dra

SIZE_LABEL = "gpucaas.dev/fleet-gpus"
IMAGE = "registry.invalid/fleet/job:1"


class Tenants:
    """Every pod of the run by name (:attr:`pods`) and the names the watch sees (:attr:`live`),
    guarded by the run's ``lock``."""

    def __init__(self, run: RunContext, node_side: NodeSide, *, hour_s: float) -> None:
        self.kube, self.pool, self.timers, self.lock, self.errors = run.kube, run.pool, run.timers, run.lock, run.errors
        self.node_side = node_side
        self.hour_s = hour_s
        self.pods: dict[str, PodRecord] = {}
        self.live: set[str] = set()
        self.watch = Watch(
            run.kube, pods_path(NAMESPACE), seen=self._seen, relisted=self._relisted, name="fleet-pods", lock=run.lock
        )

    def start(self) -> None:
        self.watch.start()

    def stop(self) -> None:
        self.watch.stop()

    def wait(self, done: Callable[[], Any], timeout: float, what: str) -> None:
        """Until ``done()`` holds, asked again at every change the watch sees."""
        self.watch.wait(done, timeout, what)

    # -- creating and deleting --------------------------------------------------------------------

    def arrive_at(self, rec: PodRecord, due: float) -> None:
        """Create ``rec``'s pod at ``due`` (wall clock)."""
        with self.lock:
            self.pods[rec.name] = rec
        self.timers.at(due, "arrive", lambda: self.pool.submit(self.create, rec))

    def create(self, rec: PodRecord) -> None:
        body = self._pod_body(rec)
        rec.created = time.time()
        try:
            self.kube.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", body=body, idempotent=True)
        except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
            self.errors.append(f"create {rec.name}: {exc}")

    def _pod_body(self, rec: PodRecord) -> dict[str, Any]:
        from services.api.domain.pods import build_pod

        pod = build_pod(
            container_id=rec.name,
            tenancy=TENANCY,
            image=IMAGE,
            gpus=rec.size,
            command=["sleep", str(int(rec.duration_s * 3600 / self.hour_s))],
            allocation_mode=dra.DRA_MODE if self.node_side.dra else dra.DEVICE_PLUGIN_MODE,
            finalizer=False,  # no API worker here: the fleet deletes its own pods
        )
        pod["metadata"]["name"] = rec.name
        pod["metadata"].setdefault("labels", {})[SIZE_LABEL] = str(rec.size)
        return pod

    def _depart(self, rec: PodRecord) -> None:
        with self.lock:
            if rec.ended is not None:
                return
            rec.ended = time.time()
        self.pool.submit(self._delete, rec)

    def _delete(self, rec: PodRecord) -> None:
        from core.kube import NotFound

        self.node_side.released(rec)
        try:
            self.kube.request(
                "DELETE",
                f"/api/v1/namespaces/{NAMESPACE}/pods/{rec.name}",
                body={"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
            )
        except NotFound:
            pass
        except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
            self.errors.append(f"delete {rec.name}: {exc}")
        if rec.node is not None:
            self.node_side.deleted(rec.node)

    def delete_all(self) -> None:
        """Every pod of the namespace deleted at once; each record ended."""
        self.kube.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods", query=[("gracePeriodSeconds", "0")])
        with self.lock:
            for rec in self.pods.values():
                if rec.ended is None:
                    rec.ended = time.time()

    # -- what the watch sees ----------------------------------------------------------------------

    def _relisted(self, pods: list[dict[str, Any]]) -> None:
        self.live = {pod["metadata"]["name"] for pod in pods}

    def _seen(self, pod: dict[str, Any], deleted: bool) -> None:
        """A pod's change (the run's lock held): its bind, its Running, its claim, its end."""
        now = time.time()
        name = pod["metadata"]["name"]
        if deleted:
            self.live.discard(name)
            return
        self.live.add(name)
        rec = self.pods.get(name)
        if rec is None:
            return
        status = pod.get("status") or {}
        for c in status.get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
                rec.unschedulable = True
        for s in status.get("resourceClaimStatuses") or []:
            if s.get("resourceClaimName"):
                rec.claim = s["resourceClaimName"]
        node: str | None = (pod.get("spec") or {}).get("nodeName")
        if node is not None and rec.bound is None:
            rec.bound, rec.node = now, node
            self.node_side.bound(rec, node)
        if status.get("phase") == "Running" and rec.running is None:
            rec.running = now
            if rec.phase == "trace":
                self.timers.at(now + rec.duration_s, "depart", lambda: self._depart(rec))
