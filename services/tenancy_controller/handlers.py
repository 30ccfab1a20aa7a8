"""Kopf handlers of the tenancy controller: thin, they decorate and call :mod:`.workflow`.

``register(registry, settings)`` adds them to an operator's registry (the
operator process may host other modules' handlers too, see :mod:`.main`):

* Tenancy resume/create/update and a resync timer -> ``ensure_tenancy``;
* Tenancy deletion (Kopf keeps its finalizer on every Tenancy) -> ``finalize_tenancy``;
* an index of Tenancies, and events of every child kind (selected by the
  ``gpucaas.dev/tenancy`` label): a child deleted or edited by hand makes the
  owning Tenancy reconcile at once instead of at the next resync;
* with queueing=kueue, the shared Kueue objects: the flavor and the WorkloadPriorityClasses
  put back when they drift, and the Cohort's pool (:mod:`.pool`) kept from indices of the GPU
  nodes and of the tenancies' guarantees.

Errors are translated here only: NotReadyYet/KubeError -> ``kopf.TemporaryError``
(retried after ``retry_delay_s``); an invalid spec never reaches here (it is a
Failed status).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any, cast

import kopf

from core import crds, kueue

from . import errors, kube, queues, workflow
from .builders import MANAGER
from .pool import PoolKeeper
from .settings import ControllerSettings

log = logging.getLogger(__name__)

TENANCY = (crds.GROUP, crds.VERSION, crds.TENANCY_PLURAL)
CHILDREN = (
    ("", "v1", "namespaces"),
    ("networking.k8s.io", "v1", "networkpolicies"),
    ("cilium.io", "v2", "ciliumnetworkpolicies"),
    ("", "v1", "resourcequotas"),
    ("", "v1", "limitranges"),
    ("", "v1", "persistentvolumeclaims"),
    ("", "v1", "persistentvolumes"),
)
#: Watched in allocation mode dra only: the claim templates (builders.build_claim_templates).
DRA_CHILD = ("resource.k8s.io", "v1", "resourceclaimtemplates")
#: Watched with queueing=kueue only (Kueue's CRDs): the tenancy's ClusterQueue and LocalQueue.
KUEUE_CHILDREN = ((kueue.GROUP, kueue.VERSION, "clusterqueues"), (kueue.GROUP, kueue.VERSION, "localqueues"))
#: The GPU ResourceFlavor every ClusterQueue shares (queues.build_resource_flavor) and the container
#: classes' WorkloadPriorityClasses: watched for drift alone.
KUEUE_FLAVORS = (kueue.GROUP, kueue.VERSION, "resourceflavors")
KUEUE_PRIORITY_CLASSES = (kueue.GROUP, kueue.VERSION, "workloadpriorityclasses")
#: With the partition check on: its AdmissionCheck (queues.build_partition_check), watched for drift alone.
KUEUE_ADMISSION_CHECKS = (kueue.GROUP, kueue.VERSION, "admissionchecks")
#: The Cohort holding the pool (pool.PoolKeeper), and the nodes whose GPUs it counts.
KUEUE_COHORTS = (kueue.GROUP, kueue.VERSION, "cohorts")
NODES = ("", "v1", "nodes")
SHARED_LABELS = {crds.LABEL_MANAGED_BY: MANAGER}
CHILD_LABELS: dict[str, Any] = {crds.LABEL_TENANCY: kopf.PRESENT, crds.LABEL_MANAGED_BY: MANAGER}


def _index_id(plural: str) -> str:
    """The id of the index of one child kind, by owning tenancy (a keyword argument of handlers)."""
    return f"children_{plural}"


def _ctx(memo: Any) -> workflow.Context:
    return memo.tenancy_controller


def _current_pool(indices: Mapping[str, Any]) -> Callable[[], queues.Pool]:
    """The pool as the GPU-node and guarantee indices show it whenever called (handler keywords)."""
    nodes, guarantees = indices["gpu_nodes"], indices["tenancy_guarantees"]
    return lambda: queues.pool_of(list(nodes.get(None, ())), guarantees.get(None, ()))


def _retrying(settings: ControllerSettings, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except errors.KubeError as exc:  # "forbidden: <user> cannot <verb> <resource>" / "Kubernetes unreachable at <url>"
        raise kopf.TemporaryError(exc.summary(), delay=settings.retry_delay_s) from exc
    except errors.NotReadyYet as exc:
        raise kopf.TemporaryError(str(exc), delay=settings.retry_delay_s) from exc


def _plain(body: Mapping[str, Any]) -> dict[str, Any]:
    """The object as the handlers and indices read it, without ``metadata.managedFields``.

    The indices hold every Tenancy and every child for the process's life; the field
    managers' nested trees were most of their objects, which each full collection of the
    garbage collector walks, pausing every handler (nothing here reads them)."""
    plain = {k: body.get(k) for k in ("apiVersion", "kind", "metadata", "spec", "status") if body.get(k) is not None}
    meta = plain.get("metadata")
    if isinstance(meta, Mapping) and "managedFields" in meta:
        plain["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return plain


def _post_warning(obj: Mapping[str, Any], reason: str, message: str) -> None:
    kopf.warn(kopf.Body(cast(kopf.RawBody, dict(obj))), reason=reason, message=message)


def register(registry: kopf.OperatorRegistry, settings: ControllerSettings) -> None:
    """Add the Tenancy handlers to ``registry``."""
    backoff = settings.retry_delay_s

    @kopf.on.startup(registry=registry)
    def tenancy_controller_startup(memo: Any, **_: Any) -> None:
        cfg = memo.kube_configuration
        client = kube.KubeClient(cfg, timeout=settings.request_timeout_s)  # the core adapter, as Kopf's login
        memo.tenancy_controller = ctx = workflow.Context.from_settings(settings, client, identity=memo.identity)
        if ctx.kueue_flavor is not None:
            memo.cohort_pool = PoolKeeper(
                client, ctx.kueue_flavor, warn=_post_warning if settings.post_events else None
            )

    @kopf.on.cleanup(registry=registry)
    def tenancy_controller_cleanup(memo: Any, **_: Any) -> None:
        ctx = getattr(memo, "tenancy_controller", None)
        if ctx is not None:
            ctx.pool.shutdown(wait=True)
            ctx.kube.close()

    # The index and the child-event handler are coroutines: Kopf runs a sync handler on its
    # worker threads (settings.execution), the same threads the reconciles need, and in a burst
    # the child events (seven or more per tenancy) would queue the reconciles behind them.
    # Both are pure in the common case; only a repair goes to a thread.
    @kopf.index(*TENANCY, id="tenancy_bodies", registry=registry)
    async def tenancy_bodies(name: str, body: kopf.Body, **_: Any) -> dict[str, dict[str, Any]]:
        return {name: _plain(body)}

    @kopf.on.resume(*TENANCY, id="reconcile-resume", registry=registry, backoff=backoff)
    @kopf.on.create(*TENANCY, id="reconcile-create", registry=registry, backoff=backoff)
    @kopf.on.update(*TENANCY, id="reconcile-update", field="spec", registry=registry, backoff=backoff)
    def reconcile_tenancy(body: kopf.Body, memo: Any, **_: Any) -> None:
        _retrying(settings, lambda: workflow.ensure_tenancy(_ctx(memo), _plain(body)))

    # resource.k8s.io/v1 exists only where DRA is (Kubernetes 1.34+): its claim templates are
    # watched (and indexed for the resync) in the DRA mode only.
    # Kueue's kinds exist only where Kueue is installed: watched with queueing=kueue only.
    watched = (
        *CHILDREN,
        *((DRA_CHILD,) if settings.allocation_mode == "dra" else ()),
        *(KUEUE_CHILDREN if settings.queueing == kueue.KUEUE else ()),
    )

    # The resync compares the Tenancy with its children as the watches last showed them
    # (indices below, no API call) and runs a full pass, with its reads, only on a difference
    # or a doubt (workflow.children_in_sync): a steady cluster costs no requests per tenancy.
    @kopf.timer(
        *TENANCY,
        id="resync",
        interval=settings.resync_interval_s,
        initial_delay=settings.resync_interval_s,
        registry=registry,
        backoff=backoff,
    )
    async def resync_tenancy(name: str, body: kopf.Body, memo: Any, **kwargs: Any) -> None:
        if (body.get("metadata") or {}).get("deletionTimestamp"):
            return
        ctx = _ctx(memo)
        if settings.queueing == kueue.KUEUE and memo.cohort_pool.kept is None:  # its last write failed
            await memo.cohort_pool.keep(_current_pool(kwargs))
        plain = _plain(body)
        observed = [child for _, _, plural in watched for child in kwargs[_index_id(plural)].get(name, [])]
        if workflow.children_in_sync(ctx, plain, observed):
            return
        await asyncio.to_thread(_retrying, settings, lambda: workflow.ensure_tenancy(ctx, plain))

    @kopf.on.delete(*TENANCY, id="finalize", registry=registry, backoff=backoff)
    def finalize_tenancy(body: kopf.Body, memo: Any, **_: Any) -> None:
        _retrying(settings, lambda: workflow.finalize_tenancy(_ctx(memo), _plain(body)))

    def repair(ctx: workflow.Context, tenancy_name: str, what: str) -> None:
        fresh = ctx.kube.get("Tenancy", tenancy_name)
        if fresh is None or (fresh.get("metadata") or {}).get("deletionTimestamp"):
            return
        try:
            workflow.ensure_tenancy(ctx, fresh)
        except (errors.NotReadyYet, errors.KubeError) as exc:
            log.warning("tenancy %s: repair after %s deferred to the resync: %s", tenancy_name, what, exc)

    async def child_changed(
        type: str | None,  # noqa: A002 - Kopf's keyword
        body: kopf.Body,
        memo: Any,
        tenancy_bodies: kopf.Index,
        **_: Any,
    ) -> None:
        if type is None:  # initial listing: the Tenancy's own resume handler covers it
            return
        labels = (body.get("metadata") or {}).get("labels") or {}
        tenancy_name = labels.get(crds.LABEL_TENANCY)
        cached = next(iter(tenancy_bodies.get(tenancy_name, [])), None)
        if cached is None or (cached.get("metadata") or {}).get("deletionTimestamp"):
            return
        ctx = _ctx(memo)
        if type != "DELETED" and not workflow.child_drifted(ctx, cached, _plain(body)):
            return
        what = f"{body.get('kind')} {body.get('metadata', {}).get('name')}"
        log.info(
            "tenancy %s: %s %s by someone else; reconciling",
            tenancy_name,
            what,
            "deleted" if type == "DELETED" else "changed",
        )
        await asyncio.to_thread(repair, ctx, tenancy_name, what)

    async def child_index(body: kopf.Body, **_: Any) -> dict[str, dict[str, Any]]:
        return {((body.get("metadata") or {}).get("labels") or {}).get(crds.LABEL_TENANCY, ""): _plain(body)}

    for group, version, plural in watched:
        kopf.index(group, version, plural, id=_index_id(plural), labels=CHILD_LABELS, registry=registry)(child_index)
        kopf.on.event(group, version, plural, id=f"child-{plural}", labels=CHILD_LABELS, registry=registry)(
            child_changed  # type: ignore[arg-type]  # the index comes as a keyword Kopf's protocol does not name
        )

    if settings.queueing == kueue.KUEUE:
        _register_kueue_shared(registry, settings)


def _register_kueue_shared(registry: kopf.OperatorRegistry, settings: ControllerSettings) -> None:
    """With queueing=kueue: the handlers of what every tenancy's queues share: the flavor, the
    WorkloadPriorityClasses and the partition AdmissionCheck (put back when they drift) and the
    Cohort's pool (:mod:`.pool`)."""

    async def shared_changed(type: str | None, body: kopf.Body, memo: Any, **_: Any) -> None:  # noqa: A002
        if type is None:  # initial listing: every tenancy's pass ensures them
            return
        ctx = _ctx(memo)
        desired = workflow.shared_drifted(ctx, _plain(body), deleted=type == "DELETED")
        if desired is None:
            return
        log.info(
            "%s %s %s by someone else; repairing",
            body.get("kind"),
            body.get("metadata", {}).get("name"),
            "deleted" if type == "DELETED" else "changed",
        )
        await asyncio.to_thread(workflow.repair_shared, ctx, desired)

    shared = [(KUEUE_FLAVORS, "shared-flavor"), (KUEUE_PRIORITY_CLASSES, "shared-priority-classes")]
    if settings.partition_check:
        shared.append((KUEUE_ADMISSION_CHECKS, "shared-admission-check"))
    for resource, id_ in shared:
        kopf.on.event(*resource, id=id_, labels=SHARED_LABELS, registry=registry)(shared_changed)

    # The pool is summed from two indices: each GPU node's count (a node that loses the instance
    # type leaves the index) and each guaranteed tenancy's guarantee (one whose guarantee drops to
    # 0 leaves it, a deleted one too).
    @kopf.index(
        *NODES, id="gpu_nodes", labels={queues.INSTANCE_TYPE_LABEL: settings.gpu_instance_type}, registry=registry
    )
    async def gpu_nodes(labels: kopf.Labels, **_: Any) -> int:
        return queues.node_gpus(labels)

    @kopf.index(
        *TENANCY,
        id="tenancy_guarantees",
        when=lambda spec, **_: queues.guarantee_of(spec) > 0,
        registry=registry,
    )
    async def tenancy_guarantees(spec: kopf.Spec, **_: Any) -> int:
        return queues.guarantee_of(spec)

    # Any node's event (also one that just lost the GPU instance type) and any Tenancy's may move
    # the pool: recomputed from the indices, written only when it moved (a pure comparison).
    @kopf.on.event(*NODES, id="pool-nodes", registry=registry)
    @kopf.on.event(*TENANCY, id="pool-tenancies", registry=registry)
    async def pool_inputs_changed(memo: Any, **kwargs: Any) -> None:
        await memo.cohort_pool.keep(_current_pool(kwargs))

    # The Cohort itself: put back when deleted or edited; its initial listing (a start, or a
    # replica taking over) compares it too, whatever this process last wrote.
    @kopf.on.event(*KUEUE_COHORTS, id="pool-cohort", labels=SHARED_LABELS, registry=registry)
    async def cohort_changed(type: str | None, body: kopf.Body, memo: Any, **kwargs: Any) -> None:  # noqa: A002
        if (body.get("metadata") or {}).get("name") != kueue.COHORT:
            return
        if type == "DELETED":
            log.info("Cohort %s deleted by someone else; putting it back", kueue.COHORT)
        await memo.cohort_pool.keep(_current_pool(kwargs), observed=_plain(body), deleted=type == "DELETED")
