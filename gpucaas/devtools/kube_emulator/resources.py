"""The resource types the emulator serves: built-ins and those defined by CRDs.

A :class:`ResourceType` says where a kind lives (group, versions, plural, scope),
which subresources it has and, for custom resources, the OpenAPI v3 schema of each
version. :class:`Registry` holds them and builds the discovery documents
(``/api``, ``/apis``, group/version resource lists) from them, so a CRD created
through the API appears in discovery at once, as on a real server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
SUBRESOURCE_VERBS = {
    "status": ("get", "patch", "update"),
    "log": ("get",),
    "binding": ("create",),
    "eviction": ("create",),
    "finalize": ("update",),
    "token": ("create",),
}
SUBRESOURCE_KINDS = {"log": "Pod", "binding": "Binding", "eviction": "Eviction", "token": "TokenRequest"}


@dataclass(frozen=True)
class ResourceType:
    """One kind served by the emulator."""

    group: str
    versions: tuple[str, ...]
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()
    categories: tuple[str, ...] = ()
    custom: bool = False
    schemas: dict[str, dict[str, Any]] = field(default_factory=dict, compare=False, hash=False)
    verbs: tuple[str, ...] = ALL_VERBS

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    @property
    def storage_version(self) -> str:
        return self.versions[0]

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    def api_version(self, version: str | None = None) -> str:
        version = version or self.storage_version
        return f"{self.group}/{version}" if self.group else version

    def display(self) -> str:
        """How error messages name the resource (``pods``, ``tenancies.gpucaas.dev``)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


def _b(group: str, version: str, plural: str, kind: str, namespaced: bool, *, short=(), subs=(), verbs=ALL_VERBS, cats=()):
    return ResourceType(
        group=group,
        versions=(version,),
        plural=plural,
        kind=kind,
        namespaced=namespaced,
        singular=kind.lower(),
        short_names=tuple(short),
        subresources=frozenset(subs),
        verbs=tuple(verbs),
        categories=tuple(cats),
    )


def builtin_types() -> list[ResourceType]:
    """The built-in kinds the project touches (plain storage unless noted in the README)."""
    return [
        _b("", "v1", "namespaces", "Namespace", False, short=["ns"], subs=["status", "finalize"]),
        _b("", "v1", "pods", "Pod", True, short=["po"], subs=["status", "log", "binding", "eviction"], cats=["all"]),
        _b("", "v1", "bindings", "Binding", True, verbs=["create"]),
        _b("", "v1", "nodes", "Node", False, short=["no"], subs=["status"]),
        _b("", "v1", "events", "Event", True, short=["ev"]),
        _b("", "v1", "services", "Service", True, short=["svc"], subs=["status"], cats=["all"]),
        _b("", "v1", "endpoints", "Endpoints", True, short=["ep"]),
        _b("", "v1", "configmaps", "ConfigMap", True, short=["cm"]),
        _b("", "v1", "secrets", "Secret", True),
        _b("", "v1", "serviceaccounts", "ServiceAccount", True, short=["sa"], subs=["token"]),
        _b("", "v1", "resourcequotas", "ResourceQuota", True, short=["quota"], subs=["status"]),
        _b("", "v1", "limitranges", "LimitRange", True, short=["limits"]),
        _b("", "v1", "persistentvolumes", "PersistentVolume", False, short=["pv"], subs=["status"]),
        _b("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, short=["pvc"], subs=["status"]),
        _b("", "v1", "replicationcontrollers", "ReplicationController", True, short=["rc"], subs=["status"]),
        _b("events.k8s.io", "v1", "events", "Event", True, short=["ev"]),
        _b("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True, short=["netpol"]),
        _b("coordination.k8s.io", "v1", "leases", "Lease", True),
        _b("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", False),
        _b("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, short=["pc"]),
        _b("storage.k8s.io", "v1", "storageclasses", "StorageClass", False, short=["sc"]),
        # Dynamic Resource Allocation (resource.k8s.io/v1, GA in 1.34).
        _b("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False),
        _b("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False),
        _b("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True, subs=["status"]),
        _b("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True),
        _b("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False,
           short=["crd", "crds"], subs=["status"]),
        _b("apps", "v1", "deployments", "Deployment", True, short=["deploy"], subs=["status"], cats=["all"]),
        _b("apps", "v1", "daemonsets", "DaemonSet", True, short=["ds"], subs=["status"], cats=["all"]),
        _b("apps", "v1", "statefulsets", "StatefulSet", True, short=["sts"], subs=["status"], cats=["all"]),
        _b("apps", "v1", "replicasets", "ReplicaSet", True, short=["rs"], subs=["status"], cats=["all"]),
        _b("batch", "v1", "jobs", "Job", True, subs=["status"], cats=["all"]),
        _b("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, short=["pdb"], subs=["status"]),
        _b("rbac.authorization.k8s.io", "v1", "roles", "Role", True),
        _b("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
        _b("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
        _b("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False),
        # answered by security.py from the caller's identity, never stored
        _b("authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview", False, verbs=["create"]),
        _b("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", False, verbs=["create"]),
        _b("authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", False, verbs=["create"]),
        _b("authorization.k8s.io", "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview", False, verbs=["create"]),
        _b("authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", False, verbs=["create"]),
        _b("authorization.k8s.io", "v1", "localsubjectaccessreviews", "LocalSubjectAccessReview", True,
           verbs=["create"]),
    ]


def type_from_crd(crd: dict[str, Any]) -> ResourceType:
    """The resource type a (validated) CRD defines; the storage version goes first."""
    spec = crd["spec"]
    names = spec["names"]
    served = [v for v in spec["versions"] if v.get("served", True)]
    served.sort(key=lambda v: not v.get("storage", False))
    subs: set[str] = set()
    schemas: dict[str, dict[str, Any]] = {}
    for v in served:
        if "status" in (v.get("subresources") or {}):
            subs.add("status")
        schema = (v.get("schema") or {}).get("openAPIV3Schema")
        if schema is not None:
            schemas[v["name"]] = schema
    return ResourceType(
        group=spec["group"],
        versions=tuple(v["name"] for v in served),
        plural=names["plural"],
        kind=names["kind"],
        namespaced=spec.get("scope", "Namespaced") == "Namespaced",
        singular=names.get("singular") or names["kind"].lower(),
        short_names=tuple(names.get("shortNames") or ()),
        subresources=frozenset(subs),
        categories=tuple(names.get("categories") or ()),
        custom=True,
        schemas=schemas,
    )


class Registry:
    """The kinds currently served, keyed by (group, plural)."""

    def __init__(self) -> None:
        self._types: dict[tuple[str, str], ResourceType] = {}
        for rt in builtin_types():
            self._types[rt.key] = rt

    def add(self, rt: ResourceType) -> None:
        self._types[rt.key] = rt

    def remove(self, key: tuple[str, str]) -> None:
        self._types.pop(key, None)

    def get(self, group: str, plural: str) -> ResourceType | None:
        return self._types.get((group, plural))

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        group, _, version = api_version.rpartition("/")
        for rt in self._types.values():
            if rt.group == group and rt.kind == kind and version in rt.versions:
                return rt
        return None

    def all(self) -> list[ResourceType]:
        return list(self._types.values())

    # ---- discovery documents -------------------------------------------------------

    def groups(self) -> dict[str, list[str]]:
        """group -> served versions (preferred first), the core group excluded."""
        out: dict[str, list[str]] = {}
        for rt in self._types.values():
            if not rt.group:
                continue
            versions = out.setdefault(rt.group, [])
            for v in rt.versions:
                if v not in versions:
                    versions.append(v)
        for versions in out.values():
            versions.sort(key=_version_priority)
        return out

    def api_group_list(self) -> dict[str, Any]:
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [self._api_group(g, vs) for g, vs in sorted(self.groups().items())],
        }

    def api_group(self, group: str) -> dict[str, Any] | None:
        versions = self.groups().get(group)
        if not versions:
            return None
        return {"kind": "APIGroup", "apiVersion": "v1", **self._api_group(group, versions)}

    @staticmethod
    def _api_group(group: str, versions: list[str]) -> dict[str, Any]:
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"name": group, "versions": entries, "preferredVersion": entries[0]}

    def resource_list(self, group: str, version: str) -> dict[str, Any] | None:
        types = [rt for rt in self._types.values() if rt.group == group and version in rt.versions]
        if not types:
            return None
        resources: list[dict[str, Any]] = []
        for rt in sorted(types, key=lambda r: r.plural):
            entry: dict[str, Any] = {
                "name": rt.plural,
                "singularName": rt.singular,
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": list(rt.verbs),
            }
            if rt.short_names:
                entry["shortNames"] = list(rt.short_names)
            if rt.categories:
                entry["categories"] = list(rt.categories)
            resources.append(entry)
            for sub in sorted(rt.subresources):
                resources.append({
                    "name": f"{rt.plural}/{sub}",
                    "singularName": "",
                    "namespaced": rt.namespaced,
                    "kind": SUBRESOURCE_KINDS.get(sub, rt.kind),
                    "verbs": list(SUBRESOURCE_VERBS.get(sub, ("get",))),
                })
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }


def _version_priority(version: str) -> tuple[int, int, int]:
    """Kubernetes version ordering: GA > beta > alpha, higher numbers first."""
    import re

    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not m:
        return (3, 0, 0)
    major = int(m.group(1))
    stage = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    minor = int(m.group(3) or 0)
    return (stage, -major, -minor)
