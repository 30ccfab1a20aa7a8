"""Kubernetes adapter: keeps the fleet index in step with the cluster, and binds pods.

Three informers (:class:`core.kube.Informer`, one thread each): FabricState (one per node,
cluster-scoped), GPULease (cluster-scoped) and pods (all namespaces). Each event updates a
cache and recomputes only the nodes it touches through the pure ``nodestate.derive_node``;
a listing replaces the cache. The extender is ready once every informer has listed once.

``bind`` first counts the pod as bound to the node (an *assumed* claim, as kube-scheduler
assumes a pod in its cache before binding it), then posts its ``Binding`` (the pods/binding
subresource), so the next decision sees the GPUs taken even before the pod watch or the
node's FabricState say so. Binds to one node go one at a time (``_node_binds``), so that
the node admits them in the order they were counted. Two races close there too:

* kube-scheduler binds asynchronously: it asks the extender to filter the next pod while
  the previous pod's bind is still on its way. The filter may then pass a node on the GPUs
  that bind is about to take. So the bind checks, under the same lock as the claim it adds,
  that the node still has a whole free partition of the pod's size, and refuses
  (:class:`~services.placement.errors.NoRoom`) when it has not: kube-scheduler schedules the
  pod again, instead of the node handing it GPUs that form no partition.
* The pod watch may lag behind the bind: an event written before the bind (the pod still
  unbound) must not take the assumed claim away. It stays until an event or a relist shows
  the pod bound, ended or gone.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client

from core import crds
from core.backoff import Backoff
from core.kube import Forbidden, Informer, Kube, KubeConnection, KubeError, NotFound, Unavailable
from services.placement.errors import BindFailed, KubernetesUnavailable, NoRoom
from services.placement.extender import GPU_RESOURCE, BindingArgs, pod_ref
from services.placement.filtered import FilteredPods
from services.placement.fleet import FleetIndex, Freeing
from services.placement.nodestate import TERMINAL_PHASES, PodClaim, derive_node, freeing, occupants, pod_claim

log = logging.getLogger(__name__)

#: the Node annotation the extender touches when a node's GPUs are freed (``FleetWatcher._nudge_loop``)
NUDGE_ANNOTATION = "gpucaas.dev/gpus-freed-at"
NUDGE_INTERVAL_S = 1.0


def new_kube(kubeconfig: str | None = None, *, timeout_s: float = 10.0) -> Kube:
    """The core adapter from a kubeconfig file, else in-cluster, else ~/.kube/config (or $KUBECONFIG)."""
    return Kube(
        KubeConnection(
            kubeconfig=Path(kubeconfig) if kubeconfig else None,
            connect_timeout_s=min(5.0, timeout_s),
            read_timeout_s=timeout_s,
        )
    )


class FleetWatcher:
    """Caches FabricStates, GPULeases and GPU pods; feeds ``FleetIndex``; binds pods."""

    def __init__(
        self,
        api: Kube | client.ApiClient,
        index: FleetIndex,
        *,
        gpu_resource: str = GPU_RESOURCE,
        watch_timeout_seconds: int = 300,
        request_timeout_seconds: float = 10.0,
        retry_seconds: float = 1.0,
        nudge_nodes: bool = False,
    ) -> None:
        self.kube = Kube.of(api)
        self.index = index
        self.gpu_resource = gpu_resource
        self.watch_timeout = watch_timeout_seconds
        self.request_timeout = request_timeout_seconds
        self.retry_seconds = retry_seconds
        self.core = self.kube.core
        self.custom = self.kube.custom
        self._lock = threading.RLock()
        self._fabric: dict[str, dict[str, Any]] = {}
        self._leases: dict[str, dict[str, Any]] = {}  # lease name -> lease
        self._claims: dict[str, PodClaim] = {}  # "ns/name" -> claim of a bound GPU pod
        #: claims ``bind`` added that no watch event or listing has shown bound yet
        self._assumed: dict[str, PodClaim] = {}
        #: pod -> the GPUs it was assumed onto while its node did not show it (``derive_node``)
        self._positions: dict[str, int] = {}
        self._freeing: dict[str, Freeing] = {}  # node -> what frees there by itself soon (``_recompute``)
        self._bind_locks: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)  # ``_node_binds``
        #: the pods of the latest filter calls, so that their binds need not read them (``remember``)
        self.filtered = FilteredPods()
        self._synced: dict[str, threading.Event] = {k: threading.Event() for k in ("fabricstates", "gpuleases", "pods")}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._informers: list[Informer] = []
        #: nodes whose GPUs were freed since the last nudge (see ``_nudge_loop``)
        self.nudge_nodes = nudge_nodes
        self._freed: set[str] = set()
        self._freed_cond = threading.Condition()
        self.nudges = 0
        self._bound_seq = 0  # PodClaim.bound_seq: the order pods were first seen bound

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> None:
        custom = f"/apis/{crds.GROUP}/{crds.VERSION}"
        informers: list[tuple[str, str, Callable[[list[dict[str, Any]]], None], Callable[[str, dict[str, Any]], None]]]
        informers = [
            ("fabricstates", f"{custom}/{crds.FABRICSTATE_PLURAL}", self._replace_fabric, self._on_fabric),
            ("gpuleases", f"{custom}/{crds.GPULEASE_PLURAL}", self._replace_leases, self._on_lease),
            ("pods", "/api/v1/pods", self._replace_pods, self._on_pod),
        ]
        if self.nudge_nodes:
            thread = threading.Thread(target=self._nudge_loop, name="placement-nudge", daemon=True)
            self._threads.append(thread)
            thread.start()
        for kind, path, replace, on_event in informers:
            informer = Informer(
                self.kube,
                path,
                name=kind,
                on_list=self._listed(kind, replace),
                on_event=on_event,
                backoff=Backoff(self.retry_seconds, self.retry_seconds),  # a steady retry, as before
                watch_timeout_s=self.watch_timeout,
                on_error=self._optional_leases if kind == "gpuleases" else None,
            )
            self._informers.append(informer.start())

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the informers (cutting their open watches) and the nudge loop."""
        self._stop.set()
        with self._freed_cond:
            self._freed_cond.notify_all()
        deadline = time.monotonic() + timeout
        for informer in self._informers:
            informer.stop(max(0.0, deadline - time.monotonic()))
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def is_synced(self) -> bool:
        return all(e.is_set() for e in self._synced.values())

    def wait_synced(self, timeout: float) -> bool:
        for event in self._synced.values():
            if not event.wait(timeout):
                return False
        return True

    # -- list + watch --------------------------------------------------------------

    def _listed(
        self, kind: str, replace: Callable[[list[dict[str, Any]]], None]
    ) -> Callable[[list[dict[str, Any]]], None]:
        def on_list(items: list[dict[str, Any]]) -> None:
            replace(items)
            self._synced[kind].set()
            log.info("listed %d %s", len(items), kind)

        return on_list

    def _optional_leases(self, exc: KubeError) -> float | None:
        """Leases refine the node state (GPUs in a firmware check) but are not required: without
        access (RBAC) or the CRD, go on from FabricState and pods, and look again now and then."""
        if not isinstance(exc, Forbidden | NotFound):
            return None
        (log.debug if self._synced["gpuleases"].is_set() else log.warning)(
            "cannot list GPULeases (%s): placing from FabricState and pods only", exc.summary()
        )
        self._synced["gpuleases"].set()
        return max(self.retry_seconds, 30.0)

    # -- what the partition admission check reads ----------------------------------

    def counted(self, key: str) -> bool:
        """Whether the pod ``namespace/name`` is counted on a node (bound, or assumed by a bind)."""
        with self._lock:
            return key in self._claims

    def freeing(self) -> dict[str, Freeing]:
        """Per node, the GPUs that free soon by themselves (``nodestate.freeing``: those of GPU pods
        being deleted, and those whose lease is Releasing or in the firmware check between
        tenants); nodes with none are left out."""
        with self._lock:
            return dict(self._freeing)

    def occupants(self) -> dict[str, dict[str, int]]:
        """Per node, where its running GPU pods are (pod key -> GPU mask, ``nodestate.occupants``),
        each only while none of its GPUs looks free: what the partition check may take back."""
        with self._lock:
            claims: dict[str, list[PodClaim]] = {}
            for claim in self._claims.values():
                claims.setdefault(claim.node, []).append(claim)
            leases: dict[str, list[dict[str, Any]]] = {}
            for lease in self._leases.values():
                leases.setdefault(_lease_node(lease) or "", []).append(lease)
            found: dict[str, dict[str, int]] = {}
            for node, on_node in claims.items():
                fabric, state = self._fabric.get(node), self.index.node(node)
                if fabric is None or state is None:
                    continue
                placed = occupants(node, fabric, leases.get(node, []), on_node, self._positions)
                found[node] = {key: mask for key, mask in placed.items() if not mask & state.free_mask}
            return found

    # -- caches ----------------------------------------------------------------------

    def _replace_fabric(self, items: list[dict[str, Any]]) -> None:
        with self._lock:
            old = set(self._fabric)
            self._fabric = {_fabric_node(o): o for o in items}
            for node in old | set(self._fabric):
                self._recompute(node)

    def _on_fabric(self, etype: str, obj: dict[str, Any]) -> None:
        node = _fabric_node(obj)
        with self._lock:
            if etype == "DELETED":
                self._fabric.pop(node, None)
            else:
                self._fabric[node] = obj
            self._recompute(node)

    def _replace_leases(self, items: list[dict[str, Any]]) -> None:
        with self._lock:
            nodes = {_lease_node(o) for o in self._leases.values()}
            self._leases = {o["metadata"]["name"]: o for o in items}
            nodes |= {_lease_node(o) for o in self._leases.values()}
            for node in nodes:
                if node is not None:
                    self._recompute(node)

    def _on_lease(self, etype: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        with self._lock:
            old = self._leases.pop(name, None)
            if etype != "DELETED":
                self._leases[name] = obj
            for node in {_lease_node(obj), _lease_node(old)}:
                if node is not None:
                    self._recompute(node)

    def _replace_pods(self, items: list[dict[str, Any]]) -> None:
        with self._lock:
            nodes = {c.node for c in self._claims.values()}
            known, self._claims = self._claims, {}
            listed: set[str] = set()
            for pod in items:
                key = pod_ref(pod)
                listed.add(key)
                if self._stale_for_assumed(key, pod):
                    self._claims[key] = self._assumed[key]
                    continue
                claim = pod_claim(pod, self.gpu_resource)
                if claim is not None:
                    self._claims[claim.key] = self._sequenced(claim, known.get(claim.key))
            for key in set(self._assumed) - listed:  # gone since the bind
                del self._assumed[key]
            for key in set(self._positions) - set(self._claims):
                del self._positions[key]
            nodes |= {c.node for c in self._claims.values()}
            for node in nodes:
                self._recompute(node)

    def _on_pod(self, etype: str, obj: dict[str, Any]) -> None:
        key = pod_ref(obj)
        claim = None if etype == "DELETED" else pod_claim(obj, self.gpu_resource)
        with self._lock:
            if etype == "DELETED":
                self._assumed.pop(key, None)
            elif self._stale_for_assumed(key, obj):
                return  # written before this extender's bind: the assumed claim stands
            old = self._claims.pop(key, None)
            if claim is not None:
                claim = self._sequenced(claim, old)
                self._claims[key] = claim
            else:
                self._positions.pop(key, None)
            for node in {c.node for c in (old, claim) if c is not None}:
                self._recompute(node)

    def _stale_for_assumed(self, key: str, pod: dict[str, Any]) -> bool:
        """Whether ``pod`` (an event or a listing) predates the bind of an assumed claim:
        the same pod, still without a node. Anything else (bound, ended, another pod of the
        same name) settles the assumption (under ``_lock``)."""
        assumed = self._assumed.get(key)
        if assumed is None:
            return False
        spec = pod.get("spec") or {}
        phase = (pod.get("status") or {}).get("phase")
        uid = (pod.get("metadata") or {}).get("uid")
        if not spec.get("nodeName") and phase not in TERMINAL_PHASES and (not assumed.uid or uid == assumed.uid):
            return True
        del self._assumed[key]
        return False

    def _sequenced(self, claim: PodClaim, old: PodClaim | None) -> PodClaim:
        """``claim`` with its bind order: kept from the claim seen before on the same node,
        else the next number (under ``_lock``)."""
        if old is not None and old.node == claim.node:
            return dataclasses.replace(claim, bound_seq=old.bound_seq)
        self._bound_seq += 1
        return dataclasses.replace(claim, bound_seq=self._bound_seq)

    def _recompute(self, node: str) -> None:
        fabric = self._fabric.get(node)
        if fabric is None:
            self.index.remove_node(node)
            self._freeing.pop(node, None)
            return
        leases = [o for o in self._leases.values() if _lease_node(o) == node]
        claims = [c for c in self._claims.values() if c.node == node]
        state = derive_node(node, fabric, leases, claims, self._positions)
        soon = freeing(fabric, leases, claims, self._positions)
        if soon.mask or soon.unplaced:
            self._freeing[node] = soon
        else:
            self._freeing.pop(node, None)
        previous = self.index.node(node)
        self.index.set_node(state)
        if (
            self.nudge_nodes
            and previous is not None
            and state.usable
            and (not previous.usable or state.free_mask & ~previous.free_mask)
        ):
            with self._freed_cond:
                self._freed.add(node)
                self._freed_cond.notify_all()
        if previous != state:
            log.debug(
                "node %s: free mask %#04x healthy %#04x usable %s",
                node,
                state.free_mask,
                state.healthy_mask,
                state.usable,
            )

    # -- nudge -----------------------------------------------------------------------

    def _nudge_loop(self) -> None:
        """Tell kube-scheduler that a node's GPUs were freed, by touching one annotation of
        the Node (``NUDGE_ANNOTATION``).

        A GPU frees in steps kube-scheduler does not watch: the pod ends (an event: pods this
        extender refused are tried again, but the GPU's lease is only Releasing), then its
        firmware check passes and the lease turns Free (a GPULease: no event for the scheduler).
        A pod the extender refused in between would wait in the scheduler's unschedulable queue
        for the next unrelated event, or five minutes. A Node's annotations changing is such an
        event (kube-scheduler's node update handler), and a pod refused by an extender is tried
        again on any event. At most one patch per node per ``NUDGE_INTERVAL_S``."""
        last: dict[str, float] = {}
        while not self._stop.is_set():
            with self._freed_cond:
                while not self._freed and not self._stop.is_set():
                    self._freed_cond.wait()
                nodes, self._freed = self._freed, set()
            for node in sorted(nodes):
                wait = last.get(node, 0.0) + NUDGE_INTERVAL_S - time.monotonic()
                if wait > 0 and self._stop.wait(wait):
                    return
                last[node] = time.monotonic()
                self._nudge(node)

    def _nudge(self, node: str) -> None:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        try:
            self.kube.call(
                self.core.patch_node,
                node,
                {"metadata": {"annotations": {NUDGE_ANNOTATION: stamp}}},
                _request_timeout=self.request_timeout,
                idempotent=True,
                what=f"nudging node {node}",
            )
            self.nudges += 1
            log.debug("node %s: GPUs freed; annotated it for kube-scheduler", node)
        except KubeError as exc:  # RBAC without nodes/patch, or Kubernetes away: the scheduler's own timer remains
            log.warning("node %s: GPUs freed, but kube-scheduler not told (%s)", node, exc.summary())

    # -- bind ------------------------------------------------------------------------

    def remember(self, pod: dict[str, Any]) -> None:
        """Keep the pod a filter call sent, for its bind (:mod:`.filtered`)."""
        self.filtered.remember(pod)

    def bind(self, args: BindingArgs) -> None:
        """Count the pod's GPUs on the node, then bind it there (pods/binding); see the module
        docstring. The pod is the copy its filter call sent, else read from kube-apiserver.
        Raises ``NoRoom`` when the node no longer has the pod's partition free."""
        what = f"binding pod {args.pod_namespace}/{args.pod_name} to {args.node}"
        pod = self.filtered.take(args.pod_uid, args.pod_namespace, args.pod_name)
        if pod is None:
            try:
                pod = self.kube.json(
                    self.core.read_namespaced_pod,
                    args.pod_name,
                    args.pod_namespace,
                    _request_timeout=self.request_timeout,
                    idempotent=True,
                    what=what,
                )
            except KubeError as exc:  # 404: the pod is gone; 403: "forbidden: <user> cannot get pods"
                raise _bind_error(what, exc) from exc
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": args.pod_name, "namespace": args.pod_namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": args.node},
        }
        if args.pod_uid:
            body["metadata"]["uid"] = args.pod_uid
        with self._node_binds(args.node):  # the node sees its binds in the order they were counted
            assumed = self._assume(pod, args, what)
            try:
                # The wire JSON, read in full so that the connection goes back to the pool: the
                # client's V1Binding model rejects the Status the API server answers with
                # (kubernetes-client/python#825), and a response left unread cost every bind a new
                # TLS connection (a fifth of the extender's CPU in benchmarks.fleet).
                self.kube.json(
                    self.core.create_namespaced_binding,
                    args.pod_namespace,
                    body,
                    _request_timeout=self.request_timeout,
                    what=what,
                )
            except KubeError as exc:  # 403: "forbidden: <user> cannot create pods/binding"; 409: bound already
                if assumed is not None:
                    self._unassume(*assumed)
                raise _bind_error(what, exc) from exc

    def _node_binds(self, node: str) -> threading.Lock:
        """The lock one node's binds take from counting to the Binding's answer.

        A node admits pods in the order their Bindings are written, and gives each the GPUs
        ``choose_gpus`` picks from what is free then. Two binds to one node in flight at once
        could be written in the other order than they were counted, and the node would give
        each the GPUs counted for the other. One at a time per node, they cannot."""
        with self._lock:
            return self._bind_locks[node]

    def _assume(self, pod: dict[str, Any], args: BindingArgs, what: str) -> tuple[PodClaim, PodClaim | None] | None:
        """Count ``pod`` as bound to ``args.node`` now, if the node still has room for it.

        Returns (the assumed claim, the claim it replaced) for ``_unassume``, or None when
        there is nothing to count (no GPUs, ended, or bound already: the Binding decides)."""
        if (pod.get("spec") or {}).get("nodeName"):
            return None
        bound = {**pod, "spec": {**(pod.get("spec") or {}), "nodeName": args.node}}
        status = dict(pod.get("status") or {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": now})
        bound["status"] = {**status, "conditions": conditions}  # bound now
        claim = pod_claim(bound, self.gpu_resource)
        if claim is None:
            return None
        with self._lock:
            old = self._claims.get(claim.key)
            if old is None or old.node != args.node:
                outcome = self.index.filter([args.node], claim.gpus)
                if not outcome.passed:
                    reason = outcome.failed.get(args.node) or outcome.unresolvable.get(args.node) or "unknown node"
                    raise NoRoom(
                        f"{what}: the node has no room for {claim.gpus} GPUs any more ({reason}): another pod "
                        "was bound there since this one was filtered; kube-scheduler will schedule it again"
                    )
            claim = self._sequenced(claim, old)
            self._claims[claim.key] = claim
            self._assumed[claim.key] = claim
            for node in {c.node for c in (old, claim) if c is not None}:
                self._recompute(node)
        return claim, old

    def _unassume(self, claim: PodClaim, old: PodClaim | None) -> None:
        """Undo ``_assume`` after a failed Binding, unless a watch event has settled the pod since."""
        with self._lock:
            if self._assumed.get(claim.key) is not claim:
                return
            del self._assumed[claim.key]
            if old is not None:
                self._claims[claim.key] = old
            else:
                self._claims.pop(claim.key, None)
                self._positions.pop(claim.key, None)
            for node in {c.node for c in (old, claim) if c is not None}:
                self._recompute(node)


def _bind_error(what: str, exc: KubeError) -> KubernetesUnavailable | BindFailed:
    """What a failed API call of ``bind`` answers kube-scheduler with."""
    if isinstance(exc, Unavailable):
        return KubernetesUnavailable(exc.summary())
    return BindFailed(f"{what}: {exc.summary() if isinstance(exc, Forbidden) else exc}")


def _fabric_node(obj: dict[str, Any]) -> str:
    return (obj.get("spec") or {}).get("node") or obj["metadata"]["name"]


def _lease_node(obj: dict[str, Any] | None) -> str | None:
    if not obj:
        return None
    return (obj.get("spec") or {}).get("node")
