"""Kubernetes adapter: every read and write the tenancy controller makes.

It speaks to the API server over HTTP through the core adapter
(:mod:`core.kube`: the official client's ``ApiClient`` with its timeouts,
retries and error tree; the same code path in a cluster, against the tests' local
kube-apiserver, or through ``kubectl proxy``), on raw JSON: the controller's objects
are wire dicts from the builders, so no model round trip can drop a field (e.g.
of the CiliumNetworkPolicy, which the client has no model for).

Writes are create-or-replace (``ensure``): read, create when absent, leave
alone when the live object already matches the desired one, otherwise replace
it keeping the live object's resourceVersion, foreign labels/annotations and
finalizers. A replace the server refuses as invalid (immutable PV/PVC fields)
becomes delete + recreate on the next pass. Client errors surface as the core
adapter's ``KubeError`` subclasses chained to the original.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes

from core import crds, kueue
from core.kube import Kube, KubeConnection

from . import errors
from .comparison import matches

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Kind:
    api_version: str
    plural: str
    namespaced: bool

    def collection(self, namespace: str | None) -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced:
            if not namespace:
                raise ValueError(f"{self.plural} are namespaced: a namespace is required")
            return f"{base}/namespaces/{namespace}/{self.plural}"
        return f"{base}/{self.plural}"


KINDS: dict[str, Kind] = {
    "Namespace": Kind("v1", "namespaces", False),
    "PersistentVolume": Kind("v1", "persistentvolumes", False),
    "PersistentVolumeClaim": Kind("v1", "persistentvolumeclaims", True),
    "ResourceQuota": Kind("v1", "resourcequotas", True),
    "LimitRange": Kind("v1", "limitranges", True),
    "Pod": Kind("v1", "pods", True),
    "NetworkPolicy": Kind("networking.k8s.io/v1", "networkpolicies", True),
    "CiliumNetworkPolicy": Kind("cilium.io/v2", "ciliumnetworkpolicies", True),
    "RoleBinding": Kind("rbac.authorization.k8s.io/v1", "rolebindings", True),
    "ResourceClaimTemplate": Kind("resource.k8s.io/v1", "resourceclaimtemplates", True),
    "Tenancy": Kind(crds.API_VERSION, crds.TENANCY_PLURAL, False),
    "ResourceFlavor": Kind(kueue.API_VERSION, "resourceflavors", False),
    "ClusterQueue": Kind(kueue.API_VERSION, "clusterqueues", False),
    "LocalQueue": Kind(kueue.API_VERSION, "localqueues", True),
    "WorkloadPriorityClass": Kind(kueue.API_VERSION, "workloadpriorityclasses", False),
    "Cohort": Kind(kueue.API_VERSION, "cohorts", False),
    "AdmissionCheck": Kind(kueue.API_VERSION, "admissionchecks", False),
}

#: Kinds whose replace can be refused for immutable fields: recreated instead.
RECREATE_ON_INVALID = frozenset({"PersistentVolume", "PersistentVolumeClaim"})

CREATED, REPLACED, UNCHANGED, RECREATING = "created", "replaced", "unchanged", "recreating"


def connection(
    kubeconfig: Path | None, *, context: str | None = None, timeout_s: float = 30.0, pool_size: int = 32
) -> KubeConnection:
    """The controller's connection: a kubeconfig file, else the in-cluster service account."""
    return KubeConnection(
        kubeconfig=kubeconfig,
        context=context,
        connect_timeout_s=min(5.0, timeout_s),
        read_timeout_s=timeout_s,
        pool_size=pool_size,
    )


class KubeClient:
    """Thread-safe (one urllib3 pool) JSON client for the kinds in :data:`KINDS`, on the core adapter."""

    def __init__(
        self, connection: KubeConnection | kubernetes.client.Configuration | Kube, *, timeout: float | None = None
    ) -> None:
        if isinstance(connection, Kube):
            self.kube = connection
        else:
            self.kube = Kube(connection, timeout=timeout)

    @property
    def server(self) -> str:
        return self.kube.server

    def close(self) -> None:
        self.kube.close()

    # -- raw -----------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        return self.kube.request(method, path, body=body, query=query, content_type=content_type)

    # -- typed by kind -------------------------------------------------------
    @staticmethod
    def _path(kind: str, name: str | None = None, namespace: str | None = None) -> str:
        k = KINDS[kind]
        path = k.collection(namespace)
        return f"{path}/{name}" if name else path

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        try:
            return self.request("GET", self._path(kind, name, namespace))
        except errors.NotFound:
            return None

    def list(
        self, kind: str, namespace: str | None = None, *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        query = [("labelSelector", label_selector)] if label_selector else None
        try:
            return list(self.request("GET", self._path(kind, None, namespace), query=query).get("items") or [])
        except errors.NotFound:
            return []

    def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        return self.request("POST", self._path(obj["kind"], None, meta.get("namespace")), body=dict(obj))

    def replace(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        return self.request("PUT", self._path(obj["kind"], meta["name"], meta.get("namespace")), body=dict(obj))

    def delete(self, kind: str, name: str, namespace: str | None = None, *, uid: str | None = None) -> bool:
        """Delete (background propagation); False when it was already gone. ``uid`` guards against a namesake."""
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            self.request("DELETE", self._path(kind, name, namespace), body=body)
        except errors.NotFound:
            return False
        return True

    def patch_status(
        self, kind: str, name: str, status: Mapping[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        return self.request(
            "PATCH",
            self._path(kind, name, namespace) + "/status",
            body={"status": dict(status)},
            content_type="application/merge-patch+json",
        )

    # -- create-or-replace ---------------------------------------------------
    def ensure(self, desired: Mapping[str, Any], *, expect_absent: bool = False) -> tuple[str, dict[str, Any]]:
        """Make the live object match ``desired``; returns (action, live object).

        ``expect_absent`` (a namespace just created) tries the create first, saving the read.
        """
        kind = desired["kind"]
        meta = desired["metadata"]
        if expect_absent:
            try:
                return CREATED, self.create(desired)
            except errors.Conflict:
                pass  # it was there after all: compare below
        for _attempt in range(3):
            live = self.get(kind, meta["name"], meta.get("namespace"))
            if live is None:
                try:
                    return CREATED, self.create(desired)
                except errors.Conflict:
                    continue  # created meanwhile: compare with it
            if matches(desired, live):
                return UNCHANGED, live
            if (live.get("metadata") or {}).get("deletionTimestamp"):
                raise errors.NotReadyYet(f"{kind} {meta['name']} is being deleted; it will be recreated")
            merged = _merge_for_replace(desired, live)
            try:
                return REPLACED, self.replace(merged)
            except errors.Conflict:
                continue  # someone wrote in between: read again
            except errors.Invalid as exc:
                if kind not in RECREATE_ON_INVALID:
                    raise
                log.info("replace of %s %s refused (%s); deleting to recreate", kind, meta["name"], exc)
                self.delete(kind, meta["name"], meta.get("namespace"), uid=live["metadata"].get("uid"))
                return RECREATING, live
        raise errors.Conflict(f"{kind} {meta['name']}: kept conflicting with other writers")


def _merge_for_replace(desired: Mapping[str, Any], live: Mapping[str, Any]) -> dict[str, Any]:
    """``desired`` carrying what others own on the live object (resourceVersion, foreign metadata, status)."""
    live_meta = live.get("metadata") or {}
    want_meta = desired["metadata"]
    meta = dict(live_meta)
    meta["labels"] = {**(live_meta.get("labels") or {}), **(want_meta.get("labels") or {})}
    if "annotations" in want_meta or live_meta.get("annotations"):
        meta["annotations"] = {**(live_meta.get("annotations") or {}), **(want_meta.get("annotations") or {})}
    if "ownerReferences" in want_meta:
        ours = {r["uid"] for r in want_meta["ownerReferences"]}
        others = [
            r for r in live_meta.get("ownerReferences") or [] if r.get("uid") not in ours and not r.get("controller")
        ]
        meta["ownerReferences"] = [*want_meta["ownerReferences"], *others]
    merged = {k: v for k, v in live.items() if k not in ("metadata",)}
    merged.update({k: v for k, v in desired.items() if k != "metadata"})
    merged["metadata"] = meta
    released = (live.get("status") or {}).get("phase") == "Released"  # its claim is gone: bind afresh
    if desired["kind"] == "PersistentVolume" and "claimRef" in (live.get("spec") or {}) and not released:
        spec = dict(merged["spec"])
        claim = dict(spec["claimRef"])
        for key in ("uid", "resourceVersion"):
            if key in live["spec"]["claimRef"]:
                claim[key] = live["spec"]["claimRef"][key]
        spec["claimRef"] = claim
        merged["spec"] = spec
    return merged
