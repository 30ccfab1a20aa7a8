"""The default ``system:`` roles and bindings a real API server creates at start.

Taken from Kubernetes' bootstrap policy, for the roles this project (the chart,
``deploy/scheduler/*.yaml``, the sandbox) binds or relies on, as of v1.31:
plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go (``clusterRoles``,
``clusterRoleBindings``) and namespace_policy.go (``extension-apiserver-authentication-reader``
in kube-system). Each carries the label ``kubernetes.io/bootstrapping: rbac-defaults``
and the annotation ``rbac.authorization.kubernetes.io/autoupdate: "true"`` as there.
The server (re)creates missing ones at start, as the RBAC post-start hook does; edited
ones are left alone (the emulator does not reconcile them).
"""

from __future__ import annotations

from typing import Any

READ = ["get", "list", "watch"]
READ_UPDATE = ["get", "list", "watch", "update", "patch"]
LABELS = {"kubernetes.io/bootstrapping": "rbac-defaults"}
ANNOTATIONS = {"rbac.authorization.kubernetes.io/autoupdate": "true"}
RBAC_V1 = "rbac.authorization.k8s.io/v1"


def _rule(verbs: list[str], groups: list[str] | None = None, resources: list[str] | None = None,
          names: list[str] | None = None, urls: list[str] | None = None) -> dict[str, Any]:
    if urls is not None:
        return {"verbs": verbs, "nonResourceURLs": urls}
    rule: dict[str, Any] = {"verbs": verbs, "apiGroups": groups or [""], "resources": resources or []}
    if names:
        rule["resourceNames"] = names
    return rule


def _events() -> dict[str, Any]:  # policy.go eventsRule()
    return _rule(["create", "update", "patch"], ["", "events.k8s.io"], ["events"])


def node_rules() -> list[dict[str, Any]]:
    """policy.go ``NodeRules()``: what a kubelet may do (RBAC part; the Node authorizer and
    NodeRestriction, which narrow it to the node's own objects, are not modelled)."""
    return [
        _rule(["create"], ["authentication.k8s.io"], ["tokenreviews"]),
        _rule(["create"], ["authorization.k8s.io"], ["subjectaccessreviews", "localsubjectaccessreviews"]),
        _rule(READ, [""], ["services"]),
        _rule(["create", "get", "list", "watch"], [""], ["nodes"]),
        _rule(["update", "patch"], [""], ["nodes/status"]),
        _rule(["update", "patch"], [""], ["nodes"]),
        _rule(["create", "update", "patch"], ["", "events.k8s.io"], ["events"]),
        _rule(READ, [""], ["pods"]),
        _rule(["create", "delete"], [""], ["pods"]),
        _rule(["update", "patch"], [""], ["pods/status"]),
        _rule(["create"], [""], ["pods/eviction"]),
        _rule(READ, [""], ["secrets", "configmaps"]),
        _rule(["get"], [""], ["persistentvolumeclaims", "persistentvolumes"]),
        _rule(["get"], [""], ["endpoints"]),
        _rule(["create", "get", "list", "watch"], ["certificates.k8s.io"], ["certificatesigningrequests"]),
        _rule(["get", "create", "update", "patch", "delete"], ["coordination.k8s.io"], ["leases"]),
        _rule(["get"], ["storage.k8s.io"], ["volumeattachments"]),
        _rule(["get", "update", "patch"], [""], ["persistentvolumeclaims/status"]),
        _rule(["create"], [""], ["serviceaccounts/token"]),
        _rule(["get", "watch", "list"], ["storage.k8s.io"], ["csidrivers"]),
        _rule(["get", "create", "update", "patch", "delete"], ["storage.k8s.io"], ["csinodes"]),
        _rule(READ, ["node.k8s.io"], ["runtimeclasses"]),
        # DynamicResourceAllocation (GA in 1.34): the kubelet reads the claims of its pods and
        # publishes slices for the drivers it runs
        _rule(["get"], ["resource.k8s.io"], ["resourceclaims"]),
        _rule(["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"],
              ["resource.k8s.io"], ["resourceslices"]),
    ]


def cluster_roles() -> dict[str, list[dict[str, Any]]]:
    return {
        "cluster-admin": [_rule(["*"], ["*"], ["*"]), _rule(["*"], urls=["*"])],
        "system:discovery": [_rule(["get"], urls=[
            "/livez", "/readyz", "/healthz", "/version", "/version/",
            "/openapi", "/openapi/*", "/api", "/api/*", "/apis", "/apis/*"])],
        "system:basic-user": [_rule(["create"], ["authorization.k8s.io"],
                                    ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]),
                              _rule(["create"], ["authentication.k8s.io"], ["selfsubjectreviews"])],
        "system:public-info-viewer": [_rule(["get"], urls=["/livez", "/readyz", "/healthz", "/version", "/version/"])],
        "system:kube-scheduler": [
            _events(),
            # leader election
            _rule(["create"], ["coordination.k8s.io"], ["leases"]),
            _rule(["get", "update"], ["coordination.k8s.io"], ["leases"], names=["kube-scheduler"]),
            # fundamental resources
            _rule(READ, [""], ["nodes"]),
            _rule(["get", "list", "watch", "delete"], [""], ["pods"]),
            _rule(["create"], [""], ["pods/binding", "bindings"]),
            _rule(["patch", "update"], [""], ["pods/status"]),
            # things that select pods
            _rule(READ, [""], ["services", "replicationcontrollers"]),
            _rule(READ, ["apps", "extensions"], ["replicasets"]),
            _rule(READ, ["apps"], ["statefulsets"]),
            # things that pods use or that apply to them
            _rule(READ, ["policy"], ["poddisruptionbudgets"]),
            _rule(READ, [""], ["persistentvolumeclaims", "persistentvolumes"]),
            _rule(["create"], ["authentication.k8s.io"], ["tokenreviews"]),
            _rule(["create"], ["authorization.k8s.io"], ["subjectaccessreviews"]),
            _rule(READ, ["storage.k8s.io"], ["csinodes"]),
            _rule(READ, [""], ["namespaces"]),
            _rule(READ, ["storage.k8s.io"], ["csidrivers"]),
            _rule(READ, ["storage.k8s.io"], ["csistoragecapacities"]),
            # DynamicResourceAllocation: the scheduler allocates claims and writes their status
            _rule(READ, ["resource.k8s.io"], ["resourceclaims", "deviceclasses"]),
            _rule(READ_UPDATE, ["resource.k8s.io"], ["resourceclaims/status"]),
            _rule(["get", "list", "watch", "create", "update", "patch", "delete"], [""], ["pods/finalizers"]),
            _rule(READ, ["resource.k8s.io"], ["resourceslices"]),
        ],
        "system:node": node_rules(),
        "system:volume-scheduler": [
            _rule(READ_UPDATE, [""], ["persistentvolumes"]),
            _rule(READ, ["storage.k8s.io"], ["storageclasses"]),
            _rule(READ_UPDATE, [""], ["persistentvolumeclaims"]),
        ],
    }


def cluster_role_bindings() -> dict[str, list[dict[str, Any]]]:
    def group(name: str) -> dict[str, Any]:
        return {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": name}

    def user(name: str) -> dict[str, Any]:
        return {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}

    return {
        "cluster-admin": [group("system:masters")],
        "system:discovery": [group("system:authenticated")],
        "system:basic-user": [group("system:authenticated")],
        "system:public-info-viewer": [group("system:authenticated"), group("system:unauthenticated")],
        "system:kube-scheduler": [user("system:kube-scheduler")],
        "system:volume-scheduler": [user("system:kube-scheduler")],
        # Left without subjects since the Node authorizer (1.8); bind system:nodes to use it.
        "system:node": [],
    }


def objects() -> list[dict[str, Any]]:
    """Every bootstrap object, ready to create."""
    meta = {"labels": dict(LABELS), "annotations": dict(ANNOTATIONS)}
    out: list[dict[str, Any]] = []
    for name, rules in cluster_roles().items():
        out.append({"apiVersion": RBAC_V1, "kind": "ClusterRole", "metadata": {"name": name, **meta},
                    "rules": rules})
    for name, subjects in cluster_role_bindings().items():
        out.append({"apiVersion": RBAC_V1, "kind": "ClusterRoleBinding", "metadata": {"name": name, **meta},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                    "subjects": subjects})
    # namespace_policy.go: kube-system/extension-apiserver-authentication-reader
    out.append({"apiVersion": RBAC_V1, "kind": "Role",
                "metadata": {"name": "extension-apiserver-authentication-reader", "namespace": "kube-system", **meta},
                "rules": [_rule(READ, [""], ["configmaps"], names=["extension-apiserver-authentication"])]})
    return out
