"""Kubernetes adapter of the partition admission check: Kueue's Workloads in, their check's state out.

Kueue lists the AdmissionCheck :data:`core.kueue.PARTITION_CHECK` in every tenancy's
ClusterQueue (the tenancy controller keeps both; docs/queues.md) and admits a Workload whose GPUs
it reserved only once the check's state in ``status.admissionChecks`` is ``Ready``. This
controller, run by the scheduler extender beside its fleet index, answers it:

* it marks the AdmissionCheck ``Active`` (Kueue holds every ClusterQueue that lists a check
  nobody answers);
* informers keep the Workloads of every namespace and the ClusterQueues (their nominal quota
  says which Workloads are within their tenancy's guarantee); a pass, at each Workload event and
  every second (GPUs free without a Workload event), decides every Workload that holds its
  quota and waits for the check (:func:`services.placement.admission.decide`), oldest
  reservation first, against the index's free GPUs less the GPUs promised to the Workloads
  passed before;
* it writes the state with a server-side apply of its own entry of ``status.admissionChecks``
  (field manager :data:`FIELD_MANAGER`), and only when the state or its message changes;
* when a Workload within its tenancy's guarantee takes a partition back
  (:func:`services.placement.admission.reclaim`), it preempts the victims as an admission check
  may: their pods first get the condition :data:`PREEMPTED_CONDITION` (why, for the API to tell
  their tenants), then their entry turns ``Retry``, and Kueue evicts them (its pods' integration
  stops the pods, its ``TerminationTarget`` condition saying ``WorkloadEvictedDueToAdmissionCheck``).
  Until their pods are gone their GPUs count as being freed, so that no later pass takes
  another partition for the same want.

Promises live in this process. After a restart, the Workloads it had passed whose pods no node
counts yet are promised their GPUs again at the first pass, before any new answer. With several
replicas only the holder of a Lease answers (:mod:`services.placement.leader`); one that takes
over promises again in the same way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from core import kueue
from core.backoff import Backoff
from core.kube import Informer, Kube, KubeError, NotFound
from services.placement.admission import RETRY_DELAYS_S, Asked, Claimant, Occupant, Promise, Verdict, decide, pod_sizes
from services.placement.extender import GPU_RESOURCE
from services.placement.fleet import FleetIndex, Freeing, NodeFree
from services.placement.leader import LeaseElector

log = logging.getLogger(__name__)

FIELD_MANAGER = "gpucaas-partition-check"
WORKLOADS = f"/apis/{kueue.API_VERSION}/workloads"
CLUSTER_QUEUES = f"/apis/{kueue.API_VERSION}/clusterqueues"
PASS_INTERVAL_S = 1.0
#: How often the AdmissionCheck's Active condition is looked at again (it is put back if gone).
ACTIVE_EVERY_S = 30.0
#: The pod condition set on a pod preempted to give a partition back to a guarantee, before its
#: Workload's entry turns Retry (services.api.domain.reasons reads it).
PREEMPTED_CONDITION = kueue.PREEMPTED_FOR_GUARANTEE_CONDITION
#: How long the GPUs of an evicted victim count as being freed, at most, while its pods stay.
EVICTING_S = 60.0


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(obj: dict[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True" for c in (obj.get("status") or {}).get("conditions") or []
    )


def _quantity(value: Any) -> int:
    """A whole-number quantity as Kueue writes GPU counts (``"3"``); anything else counts 0."""
    try:
        return max(0, int(str(value)))
    except ValueError:
        return 0


def _queue_of(workload: dict[str, Any]) -> str | None:
    """The ClusterQueue that reserved the Workload's quota."""
    return ((workload.get("status") or {}).get("admission") or {}).get("clusterQueue")


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0


def _pods_of(workload: dict[str, Any]) -> list[str]:
    """The ``namespace/name`` of the pods that own the Workload (Kueue's plain-pod integration)."""
    meta = workload["metadata"]
    return [
        f"{meta.get('namespace', '')}/{r['name']}" for r in meta.get("ownerReferences") or [] if r.get("kind") == "Pod"
    ]


def _add_freeing(freeing: dict[str, Freeing], masks: Mapping[str, int]) -> None:
    """Count ``masks`` (node -> GPUs) as being freed, beside what ``freeing`` already has."""
    for node, mask in masks.items():
        known = freeing.get(node, Freeing())
        freeing[node] = Freeing(known.mask | mask, known.unplaced)


def _reserved_at(obj: dict[str, Any]) -> str:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == "QuotaReserved":
            return str(c.get("lastTransitionTime") or "")
    return ""


class PartitionCheck:
    """Answers the partition AdmissionCheck from ``index`` (kept by the extender's FleetWatcher)."""

    def __init__(
        self,
        kube: Kube,
        index: FleetIndex,
        *,
        counted: Callable[[str], bool],
        freeing: Callable[[], Mapping[str, Freeing]],
        synced: Callable[[], bool],
        occupants: Callable[[], Mapping[str, Mapping[str, int]]] | None = None,
        gpu_resource: str = GPU_RESOURCE,
        check: str = kueue.PARTITION_CHECK,
        promise_s: float = 120.0,
        watch_timeout_s: int = 300,
        elector: LeaseElector | None = None,
    ) -> None:
        self.kube = kube
        self.index = index
        self.counted = counted
        self.freeing = freeing
        #: per node, where its running GPU pods are (FleetWatcher.occupants); None: never preempts
        self.occupants = occupants
        self.fleet_synced = synced
        self.gpu_resource = gpu_resource
        self.check = check
        self.promise_s = promise_s
        #: with several replicas, only the Lease's holder answers (None: this one always does)
        self.elector = elector
        self._workloads: dict[str, dict[str, Any]] = {}  # uid -> Workload
        self._promises: dict[str, tuple[Promise, ...]] = {}  # Workload uid -> its GPUs
        #: Workloads promised GPUs by this process, while they exist (a promise is made once)
        self._promised_once: set[str] = set()
        #: victims evicted by this process: Workload uid -> (when, its GPUs per node), counted as
        #: being freed while its pods stay (once they are gone, what their nodes still hold for
        #: them counts by itself: FleetWatcher.freeing)
        self._evicting: dict[str, tuple[float, dict[str, int]]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._informer = self._watch(WORKLOADS, "workloads", self._listed, self._event, watch_timeout_s)
        self._nominal: dict[str, int] = {}  # ClusterQueue -> its nominal quota of GPUs
        self._queues = self._watch(
            CLUSTER_QUEUES, "clusterqueues", self._queues_listed, self._queue_event, watch_timeout_s
        )
        self._thread = threading.Thread(target=self._run, name="partition-check", daemon=True)
        self._active_checked = 0.0
        self.answers: dict[str, int] = {"Ready": 0, "Pending": 0, "Retry": 0}
        self.preempted = 0  # Workloads evicted to give a partition back to a guarantee

    def _watch(
        self,
        path: str,
        name: str,
        on_list: Callable[[list[dict[str, Any]]], None],
        on_event: Callable[[str, dict[str, Any]], None],
        watch_timeout_s: int,
    ) -> Informer:
        return Informer(
            self.kube,
            path,
            name=name,
            on_list=on_list,
            on_event=on_event,
            backoff=Backoff(1.0, 5.0),
            watch_timeout_s=watch_timeout_s,
        )

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> PartitionCheck:
        self._informer.start()
        self._queues.start()
        self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self._wake.set()
        self._informer.stop(timeout)
        self._queues.stop(timeout)
        self._thread.join(timeout)

    # -- the Workload cache ------------------------------------------------------------

    def _listed(self, items: list[dict[str, Any]]) -> None:
        with self._lock:
            self._workloads = {w["metadata"]["uid"]: w for w in items}
        self._wake.set()

    def _event(self, etype: str, obj: dict[str, Any]) -> None:
        uid = obj["metadata"]["uid"]
        with self._lock:
            if etype == "DELETED":
                self._workloads.pop(uid, None)
            else:
                self._workloads[uid] = obj
        self._wake.set()

    def _nominal_of(self, queue: dict[str, Any]) -> int:
        """The ClusterQueue's own GPUs (its tenancy's guarantee): its flavors' nominal quota of them."""
        total = 0
        for group in (queue.get("spec") or {}).get("resourceGroups") or []:
            for flavor in group.get("flavors") or []:
                for resource in flavor.get("resources") or []:
                    if resource.get("name") == self.gpu_resource:
                        total += _quantity(resource.get("nominalQuota"))
        return total

    def _queues_listed(self, items: list[dict[str, Any]]) -> None:
        with self._lock:
            self._nominal = {q["metadata"]["name"]: self._nominal_of(q) for q in items}

    def _queue_event(self, etype: str, obj: dict[str, Any]) -> None:
        with self._lock:
            if etype == "DELETED":
                self._nominal.pop(obj["metadata"]["name"], None)
            else:
                self._nominal[obj["metadata"]["name"]] = self._nominal_of(obj)

    def _beyond_nominal(self, workloads: list[dict[str, Any]]) -> dict[str, int]:
        """Per ClusterQueue holding quota, the GPUs its Workloads hold beyond its nominal quota (0:
        none borrowed, what they hold is their tenancy's guarantee). Counted from the Workloads
        themselves (the ClusterQueue's usage in its status lags their reservations)."""
        reserved: dict[str, int] = {}
        for workload in workloads:
            queue = _queue_of(workload)
            if queue and self._holding(workload):
                reserved[queue] = reserved.get(queue, 0) + sum(pod_sizes(workload, self.gpu_resource))
        with self._lock:
            return {q: max(0, gpus - self._nominal[q]) for q, gpus in reserved.items() if q in self._nominal}

    # -- the loop -----------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(PASS_INTERVAL_S)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                if time.monotonic() - self._active_checked >= ACTIVE_EVERY_S:
                    self._keep_active()
                self.run_pass()
            except KubeError as exc:
                log.warning("partition check: %s; trying again", exc.summary())
            except Exception:  # a bug must not end the loop: Kueue would admit nothing more
                log.exception("partition check pass failed")

    def _keep_active(self) -> None:
        """Mark the AdmissionCheck Active unless it is (absent: the controller has not made it yet)."""
        path = f"/apis/{kueue.API_VERSION}/admissionchecks/{self.check}"
        try:
            current = self.kube.request("GET", path)
        except KubeError as exc:
            log.info("AdmissionCheck %s not readable yet (%s)", self.check, exc.summary())
            return
        if _condition(current, "Active"):
            self._active_checked = time.monotonic()
            return
        body = {
            "apiVersion": kueue.API_VERSION,
            "kind": "AdmissionCheck",
            "metadata": {"name": self.check},
            "status": {
                "conditions": [
                    {
                        "type": "Active",
                        "status": "True",
                        "reason": "Active",
                        "message": "the gpucaas scheduler extender answers it from the fleet's free NVLink partitions",
                        "lastTransitionTime": _now(),
                        "observedGeneration": (current.get("metadata") or {}).get("generation", 1),
                    }
                ]
            },
        }
        self._apply(f"{path}/status", body)
        self._active_checked = time.monotonic()
        log.info("AdmissionCheck %s marked Active", self.check)

    def _apply(self, path: str, body: dict[str, Any]) -> None:
        self.kube.request(
            "PATCH",
            path,
            body=body,
            query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
            content_type="application/apply-patch+yaml",
            idempotent=True,
        )

    # -- one pass -------------------------------------------------------------------------

    def _entry(self, workload: dict[str, Any]) -> dict[str, Any] | None:
        checks = (workload.get("status") or {}).get("admissionChecks") or []
        return next((c for c in checks if c.get("name") == self.check), None)

    def _asked(self, workload: dict[str, Any], entry: dict[str, Any]) -> Asked:
        meta = workload["metadata"]
        return Asked(
            uid=meta["uid"],
            namespace=meta.get("namespace", ""),
            name=meta["name"],
            pod_sizes=pod_sizes(workload, self.gpu_resource),
            retries=int(entry.get("retryCount") or 0),
        )

    def _holding(self, workload: dict[str, Any]) -> bool:
        """Holds quota reserved for it and is neither finished nor being evicted."""
        return (
            _condition(workload, "QuotaReserved")
            and not _condition(workload, "Finished")
            and not _condition(workload, "Evicted")
        )

    def _prune(self, now: float) -> None:
        """Drop the promises whose Workload is gone, let go of its quota, or whose pods a node counts."""
        for uid in list(self._promises):
            workload = self._workloads.get(uid)
            promises = self._promises[uid]
            if (
                workload is None
                or not self._holding(workload)
                or now - promises[0].made_at > self.promise_s
                or self._pods_counted(workload)
            ):
                del self._promises[uid]
        self._promised_once &= set(self._workloads)

    def _pods_counted(self, workload: dict[str, Any]) -> bool:
        pods = _pods_of(workload)
        return bool(pods) and all(self.counted(p) for p in pods)

    def _running(
        self, workloads: list[dict[str, Any]]
    ) -> tuple[list[Occupant], dict[str, tuple[dict[str, Any], dict[str, Any]]]]:
        """The admitted Workloads' pods where the fleet places them (what a guarantee may take
        back; the victims still being evicted left out), and each such Workload with its entry
        by uid."""
        where = self.occupants() if self.occupants is not None else {}
        pod_node: dict[str, tuple[str, int]] = {
            pod: (node, mask) for node, pods in where.items() for pod, mask in pods.items()
        }
        found: list[Occupant] = []
        running: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
        for workload in workloads:
            uid = workload["metadata"]["uid"]
            entry = self._entry(workload)
            if uid in self._evicting or entry is None or entry.get("state") != "Ready":
                continue
            if not self._holding(workload) or not _condition(workload, "Admitted"):
                continue
            running[uid] = (workload, entry)
            queue = _queue_of(workload) or ""
            gpus = sum(pod_sizes(workload, self.gpu_resource))
            priority = _int((workload.get("spec") or {}).get("priority"))
            found.extend(
                Occupant(uid, *pod_node[pod], queue, priority, gpus) for pod in _pods_of(workload) if pod in pod_node
            )
        return found, running

    def _forget_evicted(self, now: float) -> None:
        """Stop counting a victim's GPUs as being freed once its pods are gone (or after a while):
        its GPUs may go to other work as soon as they are free."""
        for uid, (since, _) in list(self._evicting.items()):
            workload = self._workloads.get(uid)
            if workload is None or not self._pods_counted(workload) or now - since > EVICTING_S:
                del self._evicting[uid]

    def run_pass(self) -> None:
        """Answer every Workload waiting for the check (oldest reservation first); public for tests."""
        if self.elector is not None and not self.elector.leading():
            with self._lock:  # another replica answers: its promises are its own
                self._promises.clear()
                self._promised_once.clear()
            return
        if not (self.fleet_synced() and self._informer.synced.is_set() and self._queues.synced.is_set()):
            return
        now = time.monotonic()
        with self._lock:
            workloads = list(self._workloads.values())
            self._prune(now)
            self._forget_evicted(now)
        nodes: list[NodeFree] = [n for n in (self.index.node(name) for name in self.index.names()) if n is not None]
        waiting: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = []
        for workload in workloads:
            entry = self._entry(workload)
            if entry is None or not self._holding(workload):
                continue
            uid = workload["metadata"]["uid"]
            if entry.get("state") == "Ready":
                if uid not in self._promised_once and not self._pods_counted(workload):
                    # passed before this process started: its GPUs are promised first
                    waiting.insert(0, ("", "", workload, entry))
                continue
            if entry.get("state") == "Pending":
                meta = workload["metadata"]
                waiting.append((_reserved_at(workload), str(meta.get("creationTimestamp") or ""), workload, entry))
        waiting.sort(key=lambda w: (w[0], w[1]))
        freeing = dict(self.freeing())
        beyond = self._beyond_nominal(workloads)
        borrowing = {q: gpus for q, gpus in beyond.items() if gpus > 0}
        held: list[Promise] = []  # this pass's holds for guaranteed Workloads still waiting
        occupants: list[Occupant] | None = None  # read once, when a guarantee first needs them
        running: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
        for _, _, workload, entry in waiting:
            asked = self._asked(workload, entry)
            promised = [p for uid, ps in self._promises.items() if uid != asked.uid for p in ps] + held
            queue = _queue_of(workload) or ""
            within = queue in beyond and beyond[queue] == 0
            claimant = None
            if within and entry.get("state") == "Pending" and self.occupants is not None:
                if occupants is None:
                    occupants, running = self._running(workloads)
                    for _, evicted in self._evicting.values():
                        _add_freeing(freeing, evicted)
                priority = _int((workload.get("spec") or {}).get("priority"))
                claimant = Claimant(queue, priority, borrowing)
            verdict = decide(
                asked,
                nodes,
                promised,
                freeing=freeing,
                now=now,
                guaranteed=within,
                claimant=claimant,
                occupants=occupants or (),
            )
            if entry.get("state") == "Ready":
                if verdict.state == "Ready":
                    self._promises[asked.uid] = verdict.promises
                    self._promised_once.add(asked.uid)
                continue
            self._answer(workload, entry, verdict)
            if verdict.state == "Ready":
                self._promises[asked.uid] = verdict.promises
                self._promised_once.add(asked.uid)
            else:
                held.extend(verdict.promises)
            if verdict.victims and occupants is not None:
                nodes_of = sorted({p.node for p in verdict.promises})
                for uid in verdict.victims:
                    victim, victim_entry = running[uid]
                    if not self._preempt(victim, victim_entry, nodes_of, same_queue=_queue_of(victim) == queue):
                        continue
                    pods = [o for o in occupants if o.workload == uid]
                    masks: dict[str, int] = {}
                    for pod in pods:
                        masks[pod.node] = masks.get(pod.node, 0) | pod.mask
                    self._evicting[uid] = (now, masks)
                    _add_freeing(freeing, masks)
                    if pods[0].queue in borrowing:  # the Workload's GPUs, once
                        borrowing[pods[0].queue] -= pods[0].gpus
                occupants = [o for o in occupants if o.workload not in verdict.victims]
                borrowing = {q: gpus for q, gpus in borrowing.items() if gpus > 0}

    def _preempt(self, workload: dict[str, Any], entry: dict[str, Any], nodes: list[str], *, same_queue: bool) -> bool:
        """Preempt a victim: say why on its pods, then withdraw its admission (entry ``Retry``:
        Kueue evicts it and stops its pods). The words end as Kueue's own preemption messages do,
        so that the API tells its tenant the cause in the same terms (and names no other tenancy).
        False when a write failed: it is left running (a pod is never stopped without its why),
        and the next pass decides again; the failure does not hold up the other Workloads."""
        cause = "prioritization in the ClusterQueue" if same_queue else "reclamation within the cohort"
        message = (
            f"Preempted to give a whole NVLink partition on {', '.join(nodes)} back to guaranteed work, due to {cause}"
        )
        namespace = workload["metadata"].get("namespace", "")
        for pod in _pods_of(workload):
            name = pod.split("/", 1)[1]
            body = {
                "status": {
                    "conditions": [
                        {
                            "type": PREEMPTED_CONDITION,
                            "status": "True",
                            "reason": "PartitionReclaimed",
                            "message": message,
                            "lastTransitionTime": _now(),
                        }
                    ]
                }
            }
            try:
                self.kube.request(
                    "PATCH",
                    f"/api/v1/namespaces/{namespace}/pods/{name}/status",
                    body=body,
                    content_type="application/strategic-merge-patch+json",
                    idempotent=True,
                )
            except NotFound:
                pass  # gone already: nothing to tell
            except KubeError as exc:
                log.warning("cannot mark pod %s preempted (%s): not preempting it", pod, exc.summary())
                return False
        try:
            self._answer(workload, entry, Verdict("Retry", message, RETRY_DELAYS_S[0]))
        except KubeError as exc:
            meta = workload["metadata"]
            log.warning(
                "cannot withdraw the admission of Workload %s/%s (%s): not preempted",
                meta.get("namespace"),
                meta.get("name"),
                exc.summary(),
            )
            return False
        self.preempted += 1
        return True

    def _written(self, workload: dict[str, Any], item: dict[str, Any]) -> None:
        """Our entry as just written, in the cached Workload, so that the next pass does not answer
        it again before the watch brings the Workload back."""
        uid = workload["metadata"]["uid"]
        with self._lock:
            cached = self._workloads.get(uid)
            if cached is None or cached.get("metadata", {}).get("resourceVersion") != workload.get("metadata", {}).get(
                "resourceVersion"
            ):
                return  # a newer version came meanwhile: it says what is
            status = dict(cached.get("status") or {})
            status["admissionChecks"] = [
                item if c.get("name") == self.check else c for c in status.get("admissionChecks") or []
            ]
            self._workloads[uid] = {**cached, "status": status}

    def _answer(self, workload: dict[str, Any], entry: dict[str, Any], verdict: Verdict) -> None:
        if entry.get("state") == verdict.state and entry.get("message") == verdict.message:
            return
        meta = workload["metadata"]
        item: dict[str, Any] = {
            "name": self.check,
            "state": verdict.state,
            "message": verdict.message,
            "lastTransitionTime": entry.get("lastTransitionTime")
            if entry.get("state") == verdict.state and entry.get("lastTransitionTime")
            else _now(),
        }
        if verdict.requeue_after_s is not None:
            item["requeueAfterSeconds"] = verdict.requeue_after_s
        body = {
            "apiVersion": kueue.API_VERSION,
            "kind": "Workload",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "status": {"admissionChecks": [item]},
        }
        self._apply(f"/apis/{kueue.API_VERSION}/namespaces/{meta['namespace']}/workloads/{meta['name']}/status", body)
        self._written(workload, item)
        self.answers[verdict.state] += 1
        log.info("Workload %s/%s: %s (%s)", meta["namespace"], meta["name"], verdict.state, verdict.message)
