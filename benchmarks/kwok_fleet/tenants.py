"""The tenants' side of a fleet run: each pod created at its arrival time (the tenant API's own
pod, ``services.api.domain.pods.build_pod``, 1/2/4/8 GPUs), deleted once it has run its trace duration,
and the pods' watch (``benchmarks.kit.watch``) that sees each one bound, Running and gone and
tells the node side of each bind.

Each pod lives in its tenancy's namespace (:attr:`PodRecord.tenancy`). With a ``queue`` (queueing
by Kueue) the pods name the tenancies' LocalQueue and their class; a pod Kueue stops (its
``TerminationTarget`` condition, then its deletion) ends there, counted as preempted when that is
the cause, and its GPUs are the node's again once it is gone. With a queue a pod's end is also
shown as its kubelet shows it before the pod goes (phase ``Succeeded`` when its run is over,
``Failed`` when Kueue stops it): Kueue finishes a pod's Workload, and gives back its quota, on
that phase; kwok alone deletes a pod without ever ending it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from benchmarks.kit.watch import Watch, pods_path
from benchmarks.kwok_fleet.context import RunContext
from benchmarks.kwok_fleet.node_objects import NAMESPACE
from benchmarks.kwok_fleet.node_side import NodeSide
from benchmarks.kwok_fleet.pod_record import PodRecord
from core import dra
from devtools.waiting import wait_for
from services.api.domain.reasons import preempted_by_queue, stopped_by_queue

SIZE_LABEL = "gpucaas.dev/fleet-gpus"
IMAGE = "registry.invalid/fleet/job:1"


class Tenants:
    """Every pod of the run by name (:attr:`pods`) and the names the watch sees (:attr:`live`),
    guarded by the run's ``lock``."""

    def __init__(
        self,
        run: RunContext,
        node_side: NodeSide,
        *,
        hour_s: float,
        namespace: str | None = NAMESPACE,
        queue: str | None = None,
    ) -> None:
        """``namespace``: the one the pods' watch lists (None: every namespace); ``queue``: the
        LocalQueue the pods name (None: no queue, kube-scheduler's alone)."""
        self.kube, self.pool, self.timers, self.lock, self.errors = run.kube, run.pool, run.timers, run.lock, run.errors
        self.node_side = node_side
        self.hour_s = hour_s
        self.queue = queue
        self.pods: dict[str, PodRecord] = {}
        self.live: set[str] = set()
        #: whether the trace's arrivals still create their pods (:meth:`stop_arrivals`), and how
        #: many of their creates are under way
        self.arriving = True
        self.creating = 0
        self.watch = Watch(
            run.kube, pods_path(namespace), seen=self._seen, relisted=self._relisted, name="fleet-pods", lock=run.lock
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
        self.timers.at(due, "arrive", lambda: self.pool.submit(self._arrive, rec))

    def _arrive(self, rec: PodRecord) -> None:
        with self.lock:
            if not self.arriving:
                return
            self.creating += 1
        try:
            self.create(rec)
        finally:
            with self.lock:
                self.creating -= 1

    def stop_arrivals(self, timeout: float) -> None:
        """No arrival creates its pod from now on, and none still under way: an arrival queued
        behind a busy pool, or a create being retried, would otherwise make its pod after the
        clear-out's delete and keep it for good."""
        with self.lock:
            self.arriving = False
        wait_for(lambda: not self.creating, timeout, what="the arrivals' creates under way")

    def create(self, rec: PodRecord) -> None:
        body = self._pod_body(rec)
        rec.created = time.time()
        try:
            self.kube.request("POST", f"/api/v1/namespaces/{rec.namespace}/pods", body=body, idempotent=True)
        except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
            self.errors.append(f"create {rec.name}: {exc}")

    def _pod_body(self, rec: PodRecord) -> dict[str, Any]:
        from services.api.domain.pods import build_pod

        pod = build_pod(
            container_id=rec.name,
            tenancy=rec.tenancy,
            image=IMAGE,
            gpus=rec.size,
            command=["sleep", str(int(rec.duration_s * 3600 / self.hour_s))],
            allocation_mode=dra.DRA_MODE if self.node_side.dra else dra.DEVICE_PLUGIN_MODE,
            finalizer=False,  # no API worker here: the fleet deletes its own pods
            queue=self.queue,
            interruptible=rec.interruptible,
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
        if self.queue is not None:
            self._end_phase(rec, "Succeeded")
        try:
            self.kube.request(
                "DELETE",
                f"/api/v1/namespaces/{rec.namespace}/pods/{rec.name}",
                body={"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
            )
        except NotFound:
            pass
        except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
            self.errors.append(f"delete {rec.name}: {exc}")
        if rec.node is not None:
            self.node_side.deleted(rec.node)

    def delete_all(self) -> None:
        """Every pod of the run's namespaces deleted at once, a namespace at a time; each record ended."""
        with self.lock:
            namespaces = sorted({NAMESPACE, *(r.namespace for r in self.pods.values())})
        for namespace in namespaces:
            self.kube.request("DELETE", f"/api/v1/namespaces/{namespace}/pods", query=[("gracePeriodSeconds", "0")])
        with self.lock:
            for rec in self.pods.values():
                if rec.ended is None:
                    rec.ended = time.time()

    def _end_phase(self, rec: PodRecord, phase: str) -> None:
        """The pod's phase set as its kubelet sets it when the container ends."""
        from core.kube import NotFound

        try:
            self.kube.request(
                "PATCH",
                f"/api/v1/namespaces/{rec.namespace}/pods/{rec.name}/status",
                body={"status": {"phase": phase}},
                content_type="application/merge-patch+json",
            )
        except NotFound:
            pass
        except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
            self.errors.append(f"end {rec.name}: {exc}")

    def _stop(self, rec: PodRecord) -> None:
        """Kueue stopped the pod: its GPUs are the node's again (before its phase shows it
        ended, as at a departure: kube-scheduler and the extender count a pod's GPUs free once
        its phase is terminal), then its phase ``Failed``."""
        self.node_side.released(rec)
        self._end_phase(rec, "Failed")

    def _gone(self, rec: PodRecord, release: bool) -> None:
        """A pod another deleted (Kueue) is gone: its GPUs are the node's again (``release``:
        not given back yet) and its FabricState shows it."""
        if release:
            self.node_side.released(rec)
        if rec.node is not None:
            self.node_side.deleted(rec.node)

    # -- what the watch sees ----------------------------------------------------------------------

    def _relisted(self, pods: list[dict[str, Any]]) -> None:
        self.live = {pod["metadata"]["name"] for pod in pods}

    def _seen(self, pod: dict[str, Any], deleted: bool) -> None:
        """A pod's change (the run's lock held): its bind, its Running, its claim, its end."""
        now = time.time()
        name = pod["metadata"]["name"]
        rec = self.pods.get(name)
        if deleted:
            self.live.discard(name)
            if rec is not None and rec.ended is None:  # deleted by another, its stop not seen
                rec.ended, rec.stopped = now, True
                self.pool.submit(self._gone, rec, True)
            elif rec is not None and rec.stopped:  # with a queue its GPUs went back at its stop
                self.pool.submit(self._gone, rec, self.queue is None)
            return
        self.live.add(name)
        if rec is None:
            return
        status = pod.get("status") or {}
        if rec.ended is None and (stopped_by_queue(pod) or pod["metadata"].get("deletionTimestamp")):
            rec.ended, rec.stopped = now, True  # stopped by Kueue (or deleted by another): its run ends here
            rec.preempted = preempted_by_queue(pod)
            rec.stop_cause = stopped_by_queue(pod)
            if self.queue is not None and rec.node is not None:
                self.pool.submit(self._stop, rec)
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
