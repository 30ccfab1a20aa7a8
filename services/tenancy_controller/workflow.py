"""One reconcile pass of a Tenancy: observe -> plan (pure) -> apply (adapter) -> status.

This is the only module that combines the pure planner (:mod:`.reconcile`)
with the adapters (:mod:`.kube`, :mod:`.resolver`); the Kopf handlers call
``ensure_tenancy`` / ``finalize_tenancy`` and translate errors, nothing else.
Passes for one Tenancy are serialised by a per-name lock, because the Tenancy's
own handlers and the child-object watchers can both trigger one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from core import crds, kueue
from core.dra import AllocationMode

from . import errors, kube, reconcile
from .builders import ApiAccess, claim_template_name_list, persistent_volume_name
from .kube import KubeClient
from .policies import NetworkConfig
from .queues import GpuFlavor, build_shared
from .resolver import resolve_host
from .settings import ControllerSettings

log = logging.getLogger(__name__)

#: Threads shared by all passes for the components applied side by side (3 per pass at most).
APPLY_THREADS = 48
#: Drift-check plans kept (one per tenancy is enough; beyond, the oldest goes).
PLAN_CACHE_SIZE = 10_000


class LockTable:
    """One lock per tenancy name."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    @contextmanager
    def hold(self, name: str) -> Iterator[None]:
        with self._guard:
            lock = self._locks.setdefault(name, threading.Lock())
        with lock:
            yield

    def forget(self, name: str) -> None:
        with self._guard:
            self._locks.pop(name, None)


@dataclass
class Context:
    """What a reconcile pass needs; built once per operator process (kept in Kopf's memo)."""

    kube: KubeClient
    network: NetworkConfig
    pod_security_level: str = "restricted"
    api_access: ApiAccess | None = None
    allocation_mode: AllocationMode = "device-plugin"
    #: The GPU nodes' Kueue flavor when Kueue queues the containers (queueing=kueue), else None.
    kueue_flavor: GpuFlavor | None = None
    #: Every ClusterQueue lists the partition AdmissionCheck, kept among the shared objects.
    partition_check: bool = False
    resolve: Callable[[str], list[str]] = resolve_host
    now: Callable[[], datetime] = lambda: datetime.now(UTC)
    locks: LockTable = field(default_factory=LockTable)
    identity: str = ""
    #: Plans for drift checks, by (uid, name, generation, spec); see _desired_plan.
    plans: dict[tuple[Any, ...], reconcile.Plan] = field(default_factory=dict)
    plans_guard: threading.Lock = field(default_factory=threading.Lock)
    #: Threads applying a pass's independent components side by side (see ensure_tenancy).
    pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(max_workers=APPLY_THREADS, thread_name_prefix="tenancy-apply")
    )

    @classmethod
    def from_settings(cls, settings: ControllerSettings, client: KubeClient, *, identity: str = "") -> Context:
        return cls(
            kube=client,
            network=NetworkConfig(
                dns_namespace=settings.dns_namespace,
                dns_labels=dict(settings.dns_labels),
                node_cidrs=tuple(settings.node_cidrs),
            ),
            pod_security_level=settings.pod_security_level,
            api_access=_api_access(settings),
            allocation_mode=settings.allocation_mode,
            kueue_flavor=(
                GpuFlavor.of_instance_type(settings.gpu_instance_type) if settings.queueing == kueue.KUEUE else None
            ),
            partition_check=settings.queueing == kueue.KUEUE and settings.partition_check,
            identity=identity,
        )


def _api_access(settings: ControllerSettings) -> ApiAccess | None:
    """The API's ServiceAccount and its tenant-secrets ClusterRole, when both are configured."""
    if not (settings.api_service_account and settings.api_secrets_cluster_role):
        return None
    namespace, _, name = settings.api_service_account.partition("/")
    return ApiAccess(namespace, name, settings.api_secrets_cluster_role)


def _write_status(ctx: Context, name: str, previous: Mapping[str, Any] | None, status: Mapping[str, Any]) -> None:
    if reconcile.status_changed(previous, status):
        try:
            ctx.kube.patch_status("Tenancy", name, status)
        except errors.NotFound:
            log.info("tenancy %s vanished before its status could be written", name)


def plan_for(ctx: Context, body: Mapping[str, Any], observed_namespace: Mapping[str, Any] | None) -> reconcile.Plan:
    nfs = ((body.get("spec") or {}).get("nfs") or {}).get("server")
    addresses: list[str] = []
    plan = reconcile.reconcile_tenancy(
        body,
        network=ctx.network,
        observed_namespace=observed_namespace,
        pod_security_level=ctx.pod_security_level,
        api_access=ctx.api_access,
        allocation_mode=ctx.allocation_mode,
        kueue_flavor=ctx.kueue_flavor,
        partition_check=ctx.partition_check,
    )
    if plan.tenancy.spec.nfs is not None and plan.tenancy.spec.nfs.server_ip is None and nfs:
        addresses = ctx.resolve(nfs)
        plan = reconcile.reconcile_tenancy(
            body,
            network=ctx.network,
            observed_namespace=observed_namespace,
            nfs_addresses=addresses,
            pod_security_level=ctx.pod_security_level,
            api_access=ctx.api_access,
            allocation_mode=ctx.allocation_mode,
            kueue_flavor=ctx.kueue_flavor,
            partition_check=ctx.partition_check,
        )
    return plan


def _component_outcome(comp: str, actions: list[tuple[str, dict[str, Any]]], plan: reconcile.Plan) -> reconcile.Outcome:
    kinds = ", ".join(f"{live.get('kind')} {live['metadata']['name']} {action}" for action, live in actions)
    if any(action == kube.RECREATING for action, _ in actions):
        return reconcile.Outcome(False, "Recreating", kinds)
    if comp == reconcile.NAMESPACE and not plan.namespace_owned:
        return reconcile.Outcome(True, "Adopted", plan.notes.get(comp, kinds))
    if comp == reconcile.STORAGE:
        pvc = actions[-1][1]
        phase = (pvc.get("status") or {}).get("phase", "Pending")
        return reconcile.Outcome(True, "Reconciled", f"{kinds}; claim {phase}")
    return reconcile.Outcome(True, "Reconciled", kinds)


def _failure_outcome(comp: str, obj: Mapping[str, Any], exc: Exception) -> reconcile.Outcome:
    if isinstance(exc, errors.NotFound) and obj.get("kind") == "CiliumNetworkPolicy":
        return reconcile.Outcome(
            False, "CiliumNotInstalled", f"the API server does not serve {obj['apiVersion']} CiliumNetworkPolicy: {exc}"
        )
    if isinstance(exc, errors.NotFound) and obj.get("apiVersion") == kueue.API_VERSION:
        return reconcile.Outcome(
            False,
            KUEUE_NOT_INSTALLED,
            f"queueing is kueue but the API server does not serve {obj['apiVersion']} {obj['kind']}: "
            f"install Kueue (its CRDs), or set queueing to none ({exc})",
        )
    if isinstance(exc, errors.Forbidden):
        return reconcile.Outcome(False, "Forbidden", str(exc))
    if isinstance(exc, errors.Invalid):
        return reconcile.Outcome(False, "Rejected", str(exc))
    return reconcile.Outcome(False, type(exc).__name__, str(exc))


#: The Queue component's reason when Kueue's CRDs are missing: no retry with backoff (every
#: tenancy would hammer the API server until Kueue is installed); the resync tries again.
KUEUE_NOT_INSTALLED = "KueueNotInstalled"


def _observe_and_plan(
    ctx: Context, body: Mapping[str, Any], name: str, previous: Mapping[str, Any]
) -> tuple[reconcile.Plan, dict[str, Any] | None, dict[str, Any] | None]:
    """The plan, the namespace observed before it, and the namespace this call created (if it did).

    A Tenancy never reconciled (no status phase yet) most likely has no namespace: it is
    created straight away, which saves the read in a burst of new tenancies; only when it
    exists after all (409) is it read and the plan made against it (adopted, or refused
    when another Tenancy owns it). Every later pass reads first, as before.
    Raises InvalidSpec / NotReadyYet as :func:`plan_for` does.
    """
    if not name:
        return plan_for(ctx, body, None), None, None
    ns_name = crds.tenant_namespace(name)
    if not previous.get("phase"):
        plan = plan_for(ctx, body, None)
        try:
            return plan, None, ctx.kube.create(plan.components[reconcile.NAMESPACE][0])
        except errors.Conflict:
            pass  # it exists: plan against what is there
        except errors.KubeError as exc:  # the pass below retries the create and records the failure
            log.debug("tenancy %s: creating namespace %s failed (%s); retried in the pass", name, ns_name, exc)
            return plan, None, None
    namespace = ctx.kube.get("Namespace", ns_name)
    return plan_for(ctx, body, namespace), namespace, None


def _apply_component(
    ctx: Context,
    name: str,
    comp: str,
    plan: reconcile.Plan,
    fresh: bool,
    first: tuple[str, dict[str, Any]] | None = None,
) -> tuple[reconcile.Outcome, Exception | None, bool]:
    """Apply one component's objects in order.

    Returns its outcome, the error that calls for a retry, and whether what follows is fresh
    (the namespace was created by this pass, so its objects can be created without a read).
    """
    shared = plan.shared.get(comp, [])
    objects = shared + (plan.components.get(comp) or [])
    if not objects:
        if not fresh:
            try:
                for kind, child, ns in plan.absent:
                    _delete_if_owned(ctx, kind, child, ns, plan.tenancy.uid)
            except errors.KubeError as exc:
                return _failure_outcome(comp, {"kind": "", "apiVersion": ""}, exc), exc, fresh
        return reconcile.Outcome(True, "NotRequested", "spec.nfs is not set: no storage"), None, fresh
    actions: list[tuple[str, dict[str, Any]]] = []
    obj = objects[0]
    try:
        for obj in objects:
            if first is not None and not actions:
                actions.append(first)  # the namespace, created while planning
            else:
                # a new namespace says nothing of what every tenancy shares: read that first
                actions.append(ctx.kube.ensure(obj, expect_absent=fresh and obj not in shared))
            if obj["kind"] == "Namespace":
                fresh = actions[-1][0] == kube.CREATED
            if actions[-1][0] in (kube.CREATED, kube.REPLACED):
                # creations at DEBUG: a new tenancy's are said by its phase line (one line, not
                # eight, per tenancy in a burst); a replace repairs drift and is worth INFO
                log.log(
                    logging.DEBUG if actions[-1][0] == kube.CREATED else logging.INFO,
                    "tenancy %s: %s %s %s",
                    name,
                    obj["kind"],
                    obj["metadata"]["name"],
                    actions[-1][0],
                )
    except (errors.KubeError, errors.NotReadyYet) as exc:
        failure = _failure_outcome(comp, obj, exc)
        return failure, None if failure.reason == KUEUE_NOT_INSTALLED else exc, fresh
    outcome = _component_outcome(comp, actions, plan)
    retry = errors.NotReadyYet(outcome.message) if outcome.reason == "Recreating" else None
    return outcome, retry, fresh


def ensure_tenancy(ctx: Context, body: Mapping[str, Any]) -> dict[str, Any]:
    """Converge the children of the Tenancy ``body`` and write its status; returns the status.

    The namespace comes first (nothing can live in a namespace that is not there); the other
    components (network policies, quota, storage) do not depend on each other and are applied
    concurrently on ``ctx.pool``, each in its own order (PV before PVC).

    Raises NotReadyYet/KubeError (after writing a Pending status) when a retry is needed.
    An unrealisable spec is not an exception: it becomes phase Failed.
    """
    meta = body.get("metadata") or {}
    name = str(meta.get("name", ""))
    previous = body.get("status") or {}
    with ctx.locks.hold(name):
        try:
            plan, namespace, created = _observe_and_plan(ctx, body, name, previous)
        except errors.InvalidSpec as exc:
            status = reconcile.failed_status(body, exc, previous=previous, now=ctx.now())
            if previous.get("phase") != reconcile.FAILED or previous.get("message") != status["message"]:
                log.warning("tenancy %s failed: %s", name, exc)
            _write_status(ctx, name, previous, status)
            return status
        except errors.NotReadyYet as exc:
            status = {
                **previous,
                "phase": reconcile.PENDING,
                "namespace": crds.tenant_namespace(name),
                "message": str(exc),
            }
            _write_status(ctx, name, previous, status)
            raise
        fresh = namespace is None  # a namespace created in this pass holds nothing yet
        first = (kube.CREATED, created) if created is not None else None
        outcomes: dict[str, reconcile.Outcome] = {}
        retry: Exception | None = None
        outcomes[reconcile.NAMESPACE], retry, fresh = _apply_component(
            ctx, name, reconcile.NAMESPACE, plan, fresh, first
        )
        if retry is None:  # else nothing can live in a namespace that is not there
            rest = [c for c in plan.components if c != reconcile.NAMESPACE]
            futures = {c: ctx.pool.submit(_apply_component, ctx, name, c, plan, fresh) for c in rest}
            for comp in rest:
                outcomes[comp], error, _ = futures[comp].result()
                retry = retry or error
        status = reconcile.tenancy_status(plan, outcomes, previous=previous, now=ctx.now())
        if status["phase"] != previous.get("phase"):
            log.info(
                "tenancy %s: phase %s -> %s (%s)%s",
                name,
                previous.get("phase"),
                status["phase"],
                status["message"],
                f" by {ctx.identity}" if ctx.identity else "",
            )
        _write_status(ctx, name, previous, status)
        if retry is not None:
            raise retry
        return status


def _delete_if_owned(ctx: Context, kind: str, name: str, namespace: str | None, uid: str) -> None:
    live = ctx.kube.get(kind, name, namespace)
    if live is not None and reconcile.owned_by(live, uid):
        ctx.kube.delete(kind, name, namespace, uid=live["metadata"].get("uid"))
        log.info("deleted %s %s%s", kind, f"{namespace}/" if namespace else "", name)


def finalize_tenancy(ctx: Context, body: Mapping[str, Any]) -> None:
    """Delete the tenancy's pods, then remove what the Tenancy made once they are gone;
    never a namespace it does not own.

    Raises PodsRemaining (after writing phase Terminating) while pods remain.
    """
    meta = body.get("metadata") or {}
    name = str(meta.get("name", ""))
    uid = str(meta.get("uid", ""))
    ns_name = crds.tenant_namespace(name)
    previous = body.get("status") or {}
    with ctx.locks.hold(name):
        namespace = ctx.kube.get("Namespace", ns_name)
        owned = reconcile.owned_by(namespace, uid)
        if namespace is not None:
            selector = None if owned else f"{crds.LABEL_TENANCY}={name}"
            listed = ctx.kube.list("Pod", ns_name, label_selector=selector)
            pods = [p["metadata"]["name"] for p in listed]
            # A deleted tenancy's workloads go with it (finished pods too): delete each pod
            # once, then wait (PodsRemaining) until the kubelet has confirmed them gone.
            for pod in listed:
                pm = pod["metadata"]
                if not pm.get("deletionTimestamp"):
                    ctx.kube.delete("Pod", pm["name"], ns_name, uid=pm.get("uid"))
                    log.info("tenancy %s: deleting pod %s/%s", name, ns_name, pm["name"])
            if pods:
                exc = errors.PodsRemaining(ns_name, sorted(pods))
                _write_status(
                    ctx, name, previous, reconcile.terminating_status(body, str(exc), previous=previous, now=ctx.now())
                )
                raise exc
            _write_status(
                ctx,
                name,
                previous,
                reconcile.terminating_status(
                    body, f"removing the objects of {ns_name}", previous=previous, now=ctx.now()
                ),
            )
            for kind, child in (
                ("CiliumNetworkPolicy", "tenant-isolation"),
                ("NetworkPolicy", "tenant-isolation"),
                ("ResourceQuota", "tenant-quota"),
                ("LimitRange", "tenant-limits"),
                ("PersistentVolumeClaim", "tenant-storage"),
                *(
                    ("ResourceClaimTemplate", t)
                    for t in (claim_template_name_list() if ctx.allocation_mode == "dra" else [])
                ),
                *([("LocalQueue", kueue.LOCAL_QUEUE)] if ctx.kueue_flavor is not None else []),
            ):
                try:
                    _delete_if_owned(ctx, kind, child, ns_name, uid)
                except errors.NotFound:
                    pass
        _delete_if_owned(ctx, "PersistentVolume", persistent_volume_name(name), None, uid)
        if ctx.kueue_flavor is not None:
            _delete_if_owned(ctx, "ClusterQueue", kueue.cluster_queue_name(name), None, uid)
        if namespace is not None and owned:
            ctx.kube.delete("Namespace", ns_name, uid=namespace["metadata"].get("uid"))
            log.info("tenancy %s: deleted namespace %s", name, ns_name)
        elif namespace is not None:
            log.info("tenancy %s: namespace %s is not owned by it; left in place", name, ns_name)
    ctx.locks.forget(name)


def _desired_plan(ctx: Context, tenancy: Mapping[str, Any]) -> reconcile.Plan:
    """The plan of ``tenancy`` for drift checks, built once per (uid, generation, spec).

    Every child event asks for it (seven children per tenancy, more with the quota's status
    updates), and a plan depends on nothing else of the Tenancy.
    """
    meta = tenancy.get("metadata") or {}
    key = (meta.get("uid"), meta.get("name"), meta.get("generation"), repr(tenancy.get("spec")))
    with ctx.plans_guard:
        plan = ctx.plans.get(key)
    if plan is None:
        plan = reconcile.reconcile_tenancy(
            tenancy,
            network=ctx.network,
            pod_security_level=ctx.pod_security_level,
            api_access=ctx.api_access,
            allocation_mode=ctx.allocation_mode,
            kueue_flavor=ctx.kueue_flavor,
            partition_check=ctx.partition_check,
        )
        with ctx.plans_guard:
            if len(ctx.plans) >= PLAN_CACHE_SIZE:
                ctx.plans.pop(next(iter(ctx.plans)))  # the oldest entry
            ctx.plans[key] = plan
    return plan


def child_drifted(ctx: Context, tenancy: Mapping[str, Any], child: Mapping[str, Any]) -> bool:
    """Whether a watched child no longer matches what the Tenancy wants (pure, no API calls)."""
    try:
        plan = _desired_plan(ctx, tenancy)
    except (errors.InvalidSpec, errors.NotReadyYet):
        return False
    meta = child.get("metadata") or {}
    for desired in plan.objects:
        dm = desired["metadata"]
        if (
            desired["kind"] == child.get("kind")
            and dm["name"] == meta.get("name")
            and dm.get("namespace") == meta.get("namespace")
        ):
            if desired["kind"] == "Namespace" and not reconcile.owned_by(child, plan.tenancy.uid):
                desired = {**desired, "metadata": {k: v for k, v in dm.items() if k != "ownerReferences"}}
            if desired["kind"] == "NetworkPolicy" and plan.tenancy.spec.nfs and plan.tenancy.spec.nfs.server_ip is None:
                return False  # addresses come from DNS: the periodic pass checks it
            return not reconcile.matches(desired, child)
    return False


def children_in_sync(ctx: Context, tenancy: Mapping[str, Any], observed: list[Mapping[str, Any]]) -> bool:
    """Whether the resync may skip ``tenancy``: its status is Ready for this generation and the
    children seen on the watches (``observed``, from the controller's indices) are exactly what
    it wants. Pure, no API calls; False whenever in doubt (a full pass then reads and repairs):

    * a child kind the controller does not watch (the API's RoleBinding) is in the plan;
    * the NFS server is a host name (its addresses come from DNS, which only a pass resolves);
    * the claim's phase changed since the status said it (the Storage condition names it).
    """
    meta = tenancy.get("metadata") or {}
    status = tenancy.get("status") or {}
    if status.get("phase") != reconcile.READY or status.get("observedGeneration") != meta.get("generation"):
        return False
    try:
        plan = _desired_plan(ctx, tenancy)
    except (errors.InvalidSpec, errors.NotReadyYet):
        return False
    nfs = plan.tenancy.spec.nfs
    if nfs is not None and nfs.server_ip is None:
        return False
    seen = {
        (o.get("kind"), (o.get("metadata") or {}).get("namespace"), (o.get("metadata") or {}).get("name")): o
        for o in observed
    }
    for desired in plan.objects:
        dm = desired["metadata"]
        live = seen.get((desired["kind"], dm.get("namespace"), dm["name"]))
        if live is None or (live.get("metadata") or {}).get("deletionTimestamp"):
            return False
        if desired["kind"] == "Namespace" and not reconcile.owned_by(live, plan.tenancy.uid):
            desired = {**desired, "metadata": {k: v for k, v in dm.items() if k != "ownerReferences"}}
        if not reconcile.matches(desired, live):
            return False
        if desired["kind"] == "PersistentVolumeClaim":
            phase = (live.get("status") or {}).get("phase", "Pending")
            storage: Mapping[str, Any] = next(
                (c for c in status.get("conditions") or [] if c.get("type") == "StorageReady"), {}
            )
            if not str(storage.get("message", "")).endswith(f"claim {phase}"):
                return False
    return all((kind, ns, name) not in seen for kind, name, ns in plan.absent)


def shared_drifted(ctx: Context, observed: Mapping[str, Any], *, deleted: bool) -> dict[str, Any] | None:
    """The desired shared object (the GPU ResourceFlavor, a container class's WorkloadPriorityClass)
    that ``observed`` is, when it was deleted or no longer matches; None when it is fine or not one
    the controller keeps (pure)."""
    if ctx.kueue_flavor is None:
        return None
    name = (observed.get("metadata") or {}).get("name")
    for desired in build_shared(ctx.kueue_flavor, partition_check=ctx.partition_check):
        if observed.get("kind") == desired["kind"] and name == desired["metadata"]["name"]:
            return desired if deleted or not reconcile.matches(desired, observed) else None
    return None


def repair_shared(ctx: Context, desired: Mapping[str, Any]) -> None:
    """Put a shared object back as specified; a failure waits for the next tenancy pass."""
    try:
        action, _ = ctx.kube.ensure(desired)
    except (errors.KubeError, errors.NotReadyYet) as exc:  # NotReadyYet: held by a finalizer while in use
        log.warning("%s %s: repair deferred to the next pass: %s", desired["kind"], desired["metadata"]["name"], exc)
        return
    log.info("%s %s %s", desired["kind"], desired["metadata"]["name"], action)
