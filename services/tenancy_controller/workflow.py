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
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpucaas.core import crds

from . import errors, kube, reconcile
from .builders import ApiAccess, persistent_volume_name
from .policies import NetworkConfig
from .resolver import resolve_host
from .settings import ControllerSettings

log = logging.getLogger(__name__)


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

    kube: kube.KubeClient
    network: NetworkConfig
    pod_security_level: str = "restricted"
    api_access: ApiAccess | None = None
    resolve: Callable[[str], list[str]] = resolve_host
    now: Callable[[], datetime] = lambda: datetime.now(UTC)
    locks: LockTable = field(default_factory=LockTable)
    identity: str = ""

    @classmethod
    def from_settings(cls, settings: ControllerSettings, client: kube.KubeClient, *, identity: str = "") -> Context:
        return cls(
            kube=client,
            network=NetworkConfig(
                dns_namespace=settings.dns_namespace,
                dns_labels=dict(settings.dns_labels),
                node_cidrs=tuple(settings.node_cidrs),
            ),
            pod_security_level=settings.pod_security_level,
            api_access=_api_access(settings),
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
        body, network=ctx.network, observed_namespace=observed_namespace, pod_security_level=ctx.pod_security_level,
        api_access=ctx.api_access,
    )
    if plan.tenancy.spec.nfs is not None and plan.tenancy.spec.nfs.server_ip is None and nfs:
        addresses = ctx.resolve(nfs)
        plan = reconcile.reconcile_tenancy(
            body, network=ctx.network, observed_namespace=observed_namespace, nfs_addresses=addresses,
            pod_security_level=ctx.pod_security_level,
            api_access=ctx.api_access,
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
        return reconcile.Outcome(False, "CiliumNotInstalled",
                                 f"the API server does not serve {obj['apiVersion']} CiliumNetworkPolicy: {exc}")
    if isinstance(exc, errors.Forbidden):
        return reconcile.Outcome(False, "Forbidden", str(exc))
    if isinstance(exc, errors.Invalid):
        return reconcile.Outcome(False, "Rejected", str(exc))
    return reconcile.Outcome(False, type(exc).__name__, str(exc))


def ensure_tenancy(ctx: Context, body: Mapping[str, Any]) -> dict[str, Any]:
    """Converge the children of the Tenancy ``body`` and write its status; returns the status.

    Raises NotReadyYet/KubeError (after writing a Pending status) when a retry is needed.
    An unrealisable spec is not an exception: it becomes phase Failed.
    """
    meta = body.get("metadata") or {}
    name = str(meta.get("name", ""))
    previous = body.get("status") or {}
    with ctx.locks.hold(name):
        try:
            namespace = ctx.kube.get("Namespace", crds.tenant_namespace(name)) if name else None
            plan = plan_for(ctx, body, namespace)
        except errors.InvalidSpec as exc:
            status = reconcile.failed_status(body, exc, previous=previous, now=ctx.now())
            if previous.get("phase") != reconcile.FAILED or previous.get("message") != status["message"]:
                log.warning("tenancy %s failed: %s", name, exc)
            _write_status(ctx, name, previous, status)
            return status
        except errors.NotReadyYet as exc:
            plan = None
            pending_error: Exception = exc
        if plan is None:
            status = {**previous, "phase": reconcile.PENDING, "namespace": crds.tenant_namespace(name),
                      "message": str(pending_error)}
            _write_status(ctx, name, previous, status)
            raise pending_error
        outcomes: dict[str, reconcile.Outcome] = {}
        retry: Exception | None = None
        fresh = namespace is None  # a namespace created in this pass holds nothing yet
        for comp in reconcile.COMPONENTS:
            objects = plan.components.get(comp) or []
            if not objects:
                if fresh:
                    outcomes[comp] = reconcile.Outcome(True, "NotRequested", "spec.nfs is not set: no storage")
                    continue
                try:
                    for kind, child, ns in plan.absent:
                        _delete_if_owned(ctx, kind, child, ns, plan.tenancy.uid)
                except errors.KubeError as exc:
                    outcomes[comp] = _failure_outcome(comp, {"kind": "", "apiVersion": ""}, exc)
                    retry = retry or exc
                    continue
                outcomes[comp] = reconcile.Outcome(True, "NotRequested", "spec.nfs is not set: no storage")
                continue
            actions = []
            try:
                for obj in objects:
                    actions.append(ctx.kube.ensure(obj, expect_absent=fresh))
                    if obj["kind"] == "Namespace":
                        fresh = actions[-1][0] == kube.CREATED
                    if actions[-1][0] in (kube.CREATED, kube.REPLACED):
                        log.info("tenancy %s: %s %s %s", name, obj["kind"], obj["metadata"]["name"], actions[-1][0])
            except (errors.KubeError, errors.NotReadyYet) as exc:
                outcomes[comp] = _failure_outcome(comp, obj, exc)
                retry = retry or exc
                if comp == reconcile.NAMESPACE:
                    break  # nothing can live in a namespace that is not there
                continue
            outcomes[comp] = _component_outcome(comp, actions, plan)
            if outcomes[comp].reason == "Recreating":
                retry = retry or errors.NotReadyYet(outcomes[comp].message)
        status = reconcile.tenancy_status(plan, outcomes, previous=previous, now=ctx.now())
        if status["phase"] != previous.get("phase"):
            log.info("tenancy %s: phase %s -> %s (%s)%s", name, previous.get("phase"), status["phase"],
                     status["message"], f" by {ctx.identity}" if ctx.identity else "")
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
                _write_status(ctx, name, previous,
                              reconcile.terminating_status(body, str(exc), previous=previous, now=ctx.now()))
                raise exc
            _write_status(ctx, name, previous, reconcile.terminating_status(
                body, f"removing the objects of {ns_name}", previous=previous, now=ctx.now()))
            for kind, child in (
                ("CiliumNetworkPolicy", "tenant-isolation"),
                ("NetworkPolicy", "tenant-isolation"),
                ("ResourceQuota", "tenant-quota"),
                ("LimitRange", "tenant-limits"),
                ("PersistentVolumeClaim", "tenant-storage"),
            ):
                try:
                    _delete_if_owned(ctx, kind, child, ns_name, uid)
                except errors.NotFound:
                    pass
        _delete_if_owned(ctx, "PersistentVolume", persistent_volume_name(name), None, uid)
        if namespace is not None and owned:
            ctx.kube.delete("Namespace", ns_name, uid=namespace["metadata"].get("uid"))
            log.info("tenancy %s: deleted namespace %s", name, ns_name)
        elif namespace is not None:
            log.info("tenancy %s: namespace %s is not owned by it; left in place", name, ns_name)
    ctx.locks.forget(name)


def child_drifted(ctx: Context, tenancy: Mapping[str, Any], child: Mapping[str, Any]) -> bool:
    """Whether a watched child no longer matches what the Tenancy wants (pure, no API calls)."""
    try:
        plan = reconcile.reconcile_tenancy(tenancy, network=ctx.network, pod_security_level=ctx.pod_security_level,
                                           api_access=ctx.api_access)
    except (errors.InvalidSpec, errors.NotReadyYet):
        return False
    meta = child.get("metadata") or {}
    for desired in plan.objects:
        dm = desired["metadata"]
        if desired["kind"] == child.get("kind") and dm["name"] == meta.get("name") and dm.get("namespace") == meta.get("namespace"):
            if desired["kind"] == "Namespace" and not reconcile.owned_by(child, plan.tenancy.uid):
                desired = {**desired, "metadata": {k: v for k, v in dm.items() if k != "ownerReferences"}}
            if desired["kind"] == "NetworkPolicy" and plan.tenancy.spec.nfs and plan.tenancy.spec.nfs.server_ip is None:
                return False  # addresses come from DNS: the periodic pass checks it
            return not reconcile.matches(desired, child)
    return False
