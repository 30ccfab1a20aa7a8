"""Kopf handlers of the tenancy controller: thin, they decorate and call :mod:`.workflow`.

``register(registry, settings)`` adds them to an operator's registry (the
operator process may host other modules' handlers too, see :mod:`.operator`):

* Tenancy resume/create/update and a resync timer -> ``ensure_tenancy``;
* Tenancy deletion (Kopf keeps its finalizer on every Tenancy) -> ``finalize_tenancy``;
* an index of Tenancies, and events of every child kind (selected by the
  ``gpucaas.dev/tenancy`` label): a child deleted or edited by hand makes the
  owning Tenancy reconcile at once instead of at the next resync.

Errors are translated here only: NotReadyYet/KubeError -> ``kopf.TemporaryError``
(retried after ``retry_delay_s``); an invalid spec never reaches here (it is a
Failed status).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import kopf

from gpucaas.core import crds

from . import errors, kube, workflow
from .builders import MANAGER
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
CHILD_LABELS = {crds.LABEL_TENANCY: kopf.PRESENT, crds.LABEL_MANAGED_BY: MANAGER}


def _ctx(memo: Any) -> workflow.Context:
    return memo.tenancy_controller


def _retrying(settings: ControllerSettings, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except errors.KubeError as exc:  # "forbidden: <user> cannot <verb> <resource>" / "Kubernetes unreachable at <url>"
        raise kopf.TemporaryError(exc.summary(), delay=settings.retry_delay_s) from exc
    except errors.NotReadyYet as exc:
        raise kopf.TemporaryError(str(exc), delay=settings.retry_delay_s) from exc


def _plain(body: Mapping[str, Any]) -> dict[str, Any]:
    return {k: body.get(k) for k in ("apiVersion", "kind", "metadata", "spec", "status") if body.get(k) is not None}


def register(registry: kopf.OperatorRegistry, settings: ControllerSettings) -> None:
    """Add the Tenancy handlers to ``registry``."""
    backoff = settings.retry_delay_s

    @kopf.on.startup(registry=registry)
    def tenancy_controller_startup(memo: Any, **_: Any) -> None:
        cfg = memo.kube_configuration
        client = kube.KubeClient(cfg, timeout=settings.request_timeout_s)  # the core adapter, as Kopf's login
        memo.tenancy_controller = workflow.Context.from_settings(settings, client, identity=memo.identity)

    @kopf.on.cleanup(registry=registry)
    def tenancy_controller_cleanup(memo: Any, **_: Any) -> None:
        ctx = getattr(memo, "tenancy_controller", None)
        if ctx is not None:
            ctx.kube.close()

    @kopf.index(*TENANCY, id="tenancy_bodies", registry=registry)
    def tenancy_bodies(name: str, body: kopf.Body, **_: Any) -> dict[str, dict[str, Any]]:
        return {name: _plain(body)}

    @kopf.on.resume(*TENANCY, id="reconcile-resume", registry=registry, backoff=backoff)
    @kopf.on.create(*TENANCY, id="reconcile-create", registry=registry, backoff=backoff)
    @kopf.on.update(*TENANCY, id="reconcile-update", field="spec", registry=registry, backoff=backoff)
    def reconcile_tenancy(body: kopf.Body, memo: Any, **_: Any) -> None:
        _retrying(settings, lambda: workflow.ensure_tenancy(_ctx(memo), _plain(body)))

    @kopf.timer(*TENANCY, id="resync", interval=settings.resync_interval_s, initial_delay=settings.resync_interval_s,
                registry=registry, backoff=backoff)
    def resync_tenancy(body: kopf.Body, memo: Any, **_: Any) -> None:
        if (body.get("metadata") or {}).get("deletionTimestamp"):
            return
        _retrying(settings, lambda: workflow.ensure_tenancy(_ctx(memo), _plain(body)))

    @kopf.on.delete(*TENANCY, id="finalize", registry=registry, backoff=backoff)
    def finalize_tenancy(body: kopf.Body, memo: Any, **_: Any) -> None:
        _retrying(settings, lambda: workflow.finalize_tenancy(_ctx(memo), _plain(body)))

    def child_changed(type: str | None, body: kopf.Body, memo: Any, tenancy_bodies: kopf.Index, **_: Any) -> None:
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
        log.info("tenancy %s: %s %s by someone else; reconciling", tenancy_name, what,
                 "deleted" if type == "DELETED" else "changed")
        fresh = ctx.kube.get("Tenancy", tenancy_name)
        if fresh is None or (fresh.get("metadata") or {}).get("deletionTimestamp"):
            return
        try:
            workflow.ensure_tenancy(ctx, fresh)
        except (errors.NotReadyYet, errors.KubeError) as exc:
            log.warning("tenancy %s: repair after %s deferred to the resync: %s", tenancy_name, what, exc)

    for group, version, plural in CHILDREN:
        kopf.on.event(group, version, plural, id=f"child-{plural}", labels=CHILD_LABELS, registry=registry)(
            child_changed
        )
