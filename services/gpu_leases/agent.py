"""The node side of GPU leases (``NodeLeases``), run beside the device plugin.

Every ``interval`` it:
1. makes sure each GPU the plugin discovered has a GPULease (created ``Free``);
2. keeps leases in step with what the kubelet allocated (PodResources): a GPU held by
   a pod becomes ``Leased`` (holder pod, namespace, tenancy, since); a ``Leased`` GPU
   no pod holds any more becomes ``Releasing``;
3. runs the firmware check for leases the controller moved to ``Checking`` and
   writes the result (``Free``, or ``Quarantined`` with the reason);
and it serves the plugin a health source: every GPU whose lease is not ``Free`` or
``Leased`` is reported Unhealthy, so the kubelet never hands out a GPU that is
releasing, being checked, or quarantined.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core import lease_states as states
from core.crds import GPULEASE_PLURAL, GROUP, LABEL_TENANCY, TENANT_NAMESPACE_PREFIX, VERSION
from core.kube import KubeError, NotFound, WatchedObjects, adapter
from core.lease_store import LABEL_NODE, LeaseConflict, LeaseStore, build_gpu_lease, lease_name
from services.gpu_leases.firmware import FirmwareCheck

if TYPE_CHECKING:
    from kubernetes import client

    from core.kube import Kube, RestKube

log = logging.getLogger(__name__)

#: lease states a GPU leaves by itself (release, then the firmware check)
TRANSIENT_STATES = frozenset({states.LeaseState.RELEASING, states.LeaseState.CHECKING})


@dataclass(frozen=True)
class NodeGPU:
    pci_address: str
    device_id: str | None = None
    physical_id: int | None = None
    model: str | None = None


@dataclass(frozen=True)
class PodHolding:
    namespace: str
    pod: str
    device_ids: tuple[str, ...]


class NodeLeases:
    """Rounds as in the module docstring. Every ``interval`` it reads PodResources (local);
    a full round (the node's leases, transitions) runs only when something may have changed:
    the node's leases changed (one :class:`~core.kube.WatchedObjects`, over either adapter), the
    pods holding GPUs changed, an allocation is waiting to be seen, or ``resync`` seconds
    passed. A round takes the leases from the watch's copy; the resync round, and every round
    while no watch is open (refused: RBAC without ``watch``; cut), lists them from Kubernetes
    instead, and then every tick is a full round. This keeps an idle node daemon under 1 % of
    a core, and a busy node's rounds off kube-apiserver, without making lease changes slower to
    follow."""

    def __init__(
        self,
        api: Kube | RestKube | client.ApiClient,
        node: str,
        gpus: Callable[[], Iterable[NodeGPU]],
        holdings: Callable[[], Iterable[PodHolding]],
        checker: FirmwareCheck,
        interval: float = 1.0,
        unseen_grace: float = 5.0,
        reset: Callable[[str], object] | None = None,
        resync: float = 60.0,
        on_health_change: Callable[[], None] | None = None,
    ) -> None:
        self.kube = adapter(api)  # the light RestKube in the daemon; any adapter works
        self.store = LeaseStore(self.kube)
        self.node = node
        self.gpus = gpus
        self.holdings = holdings
        self.checker = checker
        self.reset = reset  # GPU reset before the firmware check (core.gpu_reset)
        self.interval = interval
        self.unseen_grace = unseen_grace
        self._unhealthy: dict[str, str] = {}
        self._transient: dict[str, str] = {}
        self._allocated: dict[str, float] = {}  # pci address -> monotonic time of its last Allocate
        # pci address -> when Allocate handed it over (wall clock): the holder's ``since``, which
        # is when the pod got the GPU (its partition activated), not when a round recorded it
        self._allocated_at: dict[str, dt.datetime] = {}
        self.resync = resync
        #: called when the set of withheld GPUs changes (the plugin re-advertises at once)
        self.on_health_change = on_health_change
        #: called with the node's leases after each full round (the daemon's lease metrics)
        self.on_round: Callable[[list[dict[str, Any]]], None] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        # the node's leases, listed then watched: any change (or listing) calls for a full round,
        # which reads them from this copy while the watch is open (no list request per round)
        self._leases = WatchedObjects(
            self.kube,
            f"/apis/{GROUP}/{VERSION}/{GPULEASE_PLURAL}",
            query=[("labelSelector", f"{LABEL_NODE}={node}")],
            name=f"gpu-leases {node}",
            on_change=self._leases_changed,
        )
        self._dirty = True  # the leases may have changed since the last full round
        self._last_holdings: frozenset[PodHolding] | None = None
        self._last_full = float("-inf")
        self._last_listed = float("-inf")  # the last round that listed the leases from Kubernetes

    # --- the device plugin's health source ----------------------------------------------
    def health(self) -> Mapping[str, str]:
        """{pci address: reason} for every GPU that must not be allocated."""
        with self._lock:
            return dict(self._unhealthy)

    def transient(self) -> Mapping[str, str]:
        """The part of :meth:`health` that passes by itself: GPUs being released or checked
        (the device plugin's transient source: a pod the kubelet gave one waits, not fails)."""
        with self._lock:
            return dict(self._transient)

    def note_allocation(self, device_ids: Iterable[str]) -> None:
        """Allocate gave these GPUs to a container. Even a pod that is gone before PodResources
        shows it may have used them, so such an allocation still ends in a check."""
        now, wall = time.monotonic(), dt.datetime.now(dt.UTC)
        with self._lock:
            for d in device_ids:
                self._allocated[d] = now
                self._allocated_at[d] = wall
        self._wake.set()

    def _unseen_allocations(self, held: Mapping[str, PodHolding]) -> set[str]:
        """GPUs allocated more than ``unseen_grace`` ago that no pod is seen holding."""
        now = time.monotonic()
        with self._lock:
            for d in [d for d in self._allocated if d in held]:
                del self._allocated[d]
            due = {d for d, t in self._allocated.items() if now - t >= self.unseen_grace}
            for d in due:
                del self._allocated[d]
                self._allocated_at.pop(d, None)
        return due

    def _allocation_time(self, bdf: str) -> dt.datetime | None:
        """When Allocate last handed ``bdf`` over (None: not heard, e.g. after a restart)."""
        with self._lock:
            return self._allocated_at.get(bdf)

    # --- one round ---------------------------------------------------------------------------
    def _holder(self, namespace: str, pod: str) -> states.Holder:
        tenancy = namespace[len(TENANT_NAMESPACE_PREFIX) :] if namespace.startswith(TENANT_NAMESPACE_PREFIX) else None
        uid = None
        try:
            meta = self.kube.request("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}").get("metadata") or {}
            uid = meta.get("uid")
            tenancy = (meta.get("labels") or {}).get(LABEL_TENANCY, tenancy)
        except NotFound:
            pass
        return states.Holder(pod=pod, namespace=namespace, tenancy=tenancy, pod_uid=uid)

    def reconcile_once(self, holdings: Iterable[PodHolding] | None = None, *, listed: bool = True) -> None:
        """One full round. ``listed=False`` takes the node's leases from the watch's copy when a
        watch is open (each write below is guarded by the lease's resourceVersion, so a copy an
        event behind meets a conflict and the lease is read again); the periodic resync and any
        round without an open watch list them from Kubernetes."""
        known = {g.pci_address: g for g in self.gpus()}
        watched = None if listed else self._leases.objects()
        listing = self.store.list(self.node) if watched is None else watched
        leases = {lz["spec"]["pciAddress"]: lz for lz in listing}
        for bdf, gpu in known.items():
            if bdf not in leases:
                leases[bdf] = self.store.ensure(
                    build_gpu_lease(self.node, bdf, gpu.device_id, gpu.physical_id, gpu.model)
                )
            elif not (leases[bdf].get("status") or {}).get("state"):
                leases[bdf] = self.store.initialize(leases[bdf]["metadata"]["name"])
        held: dict[str, PodHolding] = {}
        for h in self.holdings() if holdings is None else holdings:
            for d in h.device_ids:
                held[d] = h
        unseen = self._unseen_allocations(held)
        after: list[dict[str, Any]] = []
        for lease in leases.values():
            try:
                if lease["spec"]["pciAddress"] in unseen:
                    lease = self._allocated_but_gone(lease)
                else:
                    lease = self._step(lease, held.get(lease["spec"]["pciAddress"]))
            except LeaseConflict:
                # Someone else moved it (the controller, an admin): health follows what they wrote.
                log.debug("lease %s changed during the round; next round decides", lease["metadata"]["name"])
                self._leases.forget(lease["metadata"]["name"])
                lease = self.store.get(lease["metadata"]["name"]) or lease
            except states.IllegalTransition as exc:
                log.warning("node=%s lease %s: %s", self.node, lease["metadata"]["name"], exc)
            self._leases.wrote(lease)  # the next round reads this, not what it replaced
            after.append(lease)
        self._refresh_health(after)

    def _step(self, lease: dict[str, Any], holding: PodHolding | None) -> dict[str, Any]:
        """Advance one lease if it is the node's turn; returns the lease as it now stands."""
        status = lease.get("status") or {}
        state = states.state_of(status)
        name = lease["metadata"]["name"]
        bdf = lease["spec"]["pciAddress"]
        if state is states.LeaseState.CHECKING and not (status.get("lastCheck") or {}).get("result"):
            if holding is not None:
                # The kubelet gave the GPU to a new pod before the plugin's health update withheld
                # it. That pod cannot start (PreStartContainer refuses a GPU that is not Free or
                # Leased), so the check runs all the same; once it passes, the next round leases
                # the GPU to the pod and its start goes through.
                log.info(
                    "node=%s gpu=%s checking it before %s/%s, which the kubelet already gave it to, starts",
                    self.node,
                    bdf,
                    holding.namespace,
                    holding.pod,
                )
            return self._check(name, bdf)
        if holding is not None:
            holder = status.get("holder") or {}
            same = (holder.get("namespace"), holder.get("pod")) == (holding.namespace, holding.pod)
            if state is states.LeaseState.FREE:
                log.info("node=%s gpu=%s leased to %s/%s", self.node, bdf, holding.namespace, holding.pod)
                since = self._allocation_time(bdf)
                leased = self.store.write_status(
                    lease, states.allocated(status, self._holder(holding.namespace, holding.pod), now=since)
                )
                with self._lock:  # recorded: the next holder's Allocate stamps its own time
                    if self._allocated_at.get(bdf) == since:
                        self._allocated_at.pop(bdf, None)
                return leased
            if state is states.LeaseState.LEASED and not same:
                # The previous holder is gone and the kubelet already gave the GPU to another pod.
                log.error(
                    "node=%s gpu=%s now held by %s/%s while leased to %s/%s: releasing for a check",
                    self.node,
                    bdf,
                    holding.namespace,
                    holding.pod,
                    holder.get("namespace"),
                    holder.get("pod"),
                )
                return self.store.write_status(lease, states.released(status, "the kubelet reassigned the GPU"))
            if state is states.LeaseState.LEASED:
                with self._lock:  # an Allocate for the holder it already has (a kubelet restart)
                    self._allocated_at.pop(bdf, None)
            if state not in states.ALLOCATABLE_STATES:
                log.error(
                    "node=%s gpu=%s is %s but allocated to %s/%s", self.node, bdf, state, holding.namespace, holding.pod
                )
            return lease
        if state is states.LeaseState.LEASED:
            holder = status.get("holder") or {}
            if self._still_running(holder):
                # A kubelet that has just started answers PodResources before it has read back its
                # pods: the API server's word that the holder's container runs wins until it stops.
                log.info(
                    "node=%s gpu=%s: PodResources does not list %s/%s, whose container the API server "
                    "says runs; keeping the lease",
                    self.node,
                    bdf,
                    holder.get("namespace"),
                    holder.get("pod"),
                )
                return lease
            why = f"pod {holder.get('namespace')}/{holder.get('pod')} no longer holds the GPU (PodResources)"
            log.info("node=%s gpu=%s releasing: %s", self.node, bdf, why)
            return self.store.write_status(lease, states.released(status, why))
        return lease

    def _still_running(self, holder: Mapping[str, Any]) -> bool:
        """Whether the holder pod (the same uid) has a container the API server says is running."""
        namespace, pod = holder.get("namespace"), holder.get("pod")
        if not namespace or not pod:
            return False
        try:
            found = self.kube.request("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}")
        except NotFound:
            return False
        if holder.get("podUID") and (found.get("metadata") or {}).get("uid") != holder.get("podUID"):
            return False
        st = found.get("status") or {}
        return st.get("phase") not in ("Succeeded", "Failed") and any(
            "running" in (c.get("state") or {}) for c in st.get("containerStatuses") or []
        )

    def _allocated_but_gone(self, lease: dict[str, Any]) -> dict[str, Any]:
        status = lease.get("status") or {}
        if states.state_of(status) is not states.LeaseState.FREE:
            return lease  # already on its way through a check (or held): nothing more to do
        holder = states.Holder(pod="(not seen)", namespace="(unknown)", tenancy=None)
        leased = states.allocated(status, holder)
        why = f"allocated, but no pod was seen holding it within {self.unseen_grace:.0f}s"
        log.warning("node=%s gpu=%s %s: checking it anyway", self.node, lease["spec"]["pciAddress"], why)
        return self.store.write_status(lease, states.released(leased, why))

    def _check(self, name: str, bdf: str) -> dict[str, Any]:
        # --- GPU reset hook ------------------------------------------------------------------
        # After release the GPU is reset (secondary bus reset, as the Shared NVSwitch model
        # asks of the hypervisor) and only then is its firmware checked: the check sees the
        # GPU as the next tenant will. A GPU that cannot be reset is quarantined.
        if self.reset is not None:
            try:
                self.reset(bdf)
            except Exception as exc:  # noqa: BLE001 - any failed reset fails the check
                log.warning("node=%s gpu=%s reset before the firmware check failed: %s", self.node, bdf, exc)
                why = f"GPU reset failed: {exc}"
                return self.store.transition(name, lambda st: states.check_failed(st, "ResetFailed", why))
        # -------------------------------------------------------------------------------------
        result = self.checker.check(bdf)
        if result.passed:

            def change(st: dict[str, Any] | None) -> dict[str, Any]:
                return states.check_passed(st, result.rom_sha256 or "", result.rom_version)
        else:

            def change(st: dict[str, Any] | None) -> dict[str, Any]:
                return states.check_failed(st, result.reason, result.message, result.rom_sha256, result.rom_version)

        log.log(
            logging.INFO if result.passed else logging.WARNING,
            "node=%s gpu=%s check %s: %s",
            self.node,
            bdf,
            result.reason,
            result.message,
        )
        return self.store.transition(name, change)

    def _refresh_health(self, leases: list[dict[str, Any]]) -> None:
        if self.on_round is not None:
            self.on_round(leases)
        bad, passing = {}, {}
        for lz in leases:
            st = states.state_of(lz.get("status"))
            if st not in states.ALLOCATABLE_STATES:
                reason = (lz.get("status") or {}).get("reason", "")
                bad[lz["spec"]["pciAddress"]] = f"GPU lease {lz['metadata']['name']} is {st}: {reason}"
                if st in TRANSIENT_STATES:
                    passing[lz["spec"]["pciAddress"]] = bad[lz["spec"]["pciAddress"]]
        with self._lock:
            changed, self._unhealthy = bad != self._unhealthy, bad
            self._transient = passing
        if changed and self.on_health_change is not None:
            try:
                self.on_health_change()
            except Exception:  # the plugin's next health check picks it up anyway
                log.exception("node=%s health change callback failed", self.node)

    # --- loop -----------------------------------------------------------------------------------
    def _leases_changed(self) -> None:
        self._dirty = True
        self._wake.set()

    @property
    def watching(self) -> bool:
        """A watch on this node's leases is open (while it is not, every tick is a full round)."""
        return self._leases.watching

    def _round_needed(self, holdings: frozenset[PodHolding]) -> bool:
        with self._lock:
            waiting = bool(self._allocated)
        return (
            not self.watching
            or self._dirty
            or waiting
            or holdings != self._last_holdings
            or time.monotonic() - self._last_full >= self.resync
        )

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                holdings = frozenset(self.holdings())
                if self._round_needed(holdings):
                    self._dirty = False
                    resync = time.monotonic() - self._last_listed >= self.resync
                    self.reconcile_once(holdings, listed=resync)
                    self._last_holdings, self._last_full = holdings, time.monotonic()
                    if resync:
                        self._last_listed = self._last_full
            except KubeError as exc:  # forbidden vs unreachable, said as such; the next round retries
                self._dirty = True
                log.warning("node=%s lease round failed: %s", self.node, exc.summary())
            except Exception as exc:  # noqa: BLE001 (anything else: the next round retries)
                self._dirty = True
                log.warning("node=%s lease round failed: %s", self.node, exc)
            self._wake.wait(self.interval)
            self._wake.clear()

    def start(self) -> None:
        self._leases.start()
        self._thread = threading.Thread(target=self._loop, name="gpu-leases", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._leases.stop()
        if self._thread is not None:
            self._thread.join(timeout=10)


__all__ = ["NodeLeases", "NodeGPU", "PodHolding", "lease_name"]
