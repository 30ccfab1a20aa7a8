"""The sandbox's Kubernetes identities: the chart's own ServiceAccounts and RBAC, one token each.

``gpucaas sandbox`` installs what ``helm install`` would put on the cluster side — the
objects the chart renders (real Helm engine, :mod:`gpucaas.chart`) that are not
workloads: ServiceAccounts, ClusterRoles, Roles, their bindings, the RuntimeClass, the
StorageClass of tenant volumes, ConfigMaps and the ClusterKopfPeering — and then mints a token per ServiceAccount with
TokenRequest (``POST .../serviceaccounts/<name>/token``, as the kubelet does for a
projected token) and writes one kubeconfig per process. Each gpucaas process runs as
its chart ServiceAccount, never as the admin, so a permission the chart lacks fails
the sandbox as it would fail on a cluster.

The nodes' kubelets are not ServiceAccounts: each authenticates as ``system:node:<node>`` in
``system:nodes`` (its client certificate), judged by the Node authorizer and the
NodeRestriction admission plugin: it may change its own Node and the pods bound to it,
and read what those pods reference, nothing else. kube-scheduler and
kube-controller-manager run with their own client certificates
(:mod:`devtools.local_cluster`).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from devtools.sandbox import hostpath_volumes
from devtools.sandbox.queueing import chart_values
from gpucaas import chart

#: Kinds of the rendered chart the sandbox applies (the cluster side; no workloads).
CLUSTER_SIDE_KINDS = (
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "RuntimeClass",
    "ConfigMap",
    "ClusterKopfPeering",
    "DeviceClass",
    "StorageClass",
)
#: Values the sandbox renders the chart with: every component the sandbox runs, and the
#: StorageClass of tenant volumes on kube-controller-manager's HostPath provisioner.
SANDBOX_VALUES: dict[str, Any] = {"schedulerExtender": {"enabled": True}, **hostpath_volumes.chart_values()}
#: ... and in the DRA allocation mode (binding conditions on: kube-scheduler 1.36 honours them).
SANDBOX_DRA_VALUES: dict[str, Any] = {
    **SANDBOX_VALUES,
    "allocation": {"mode": "dra"},
    "draDriver": {"bindingConditions": True},
}


def sandbox_values(allocation_mode: str, queueing: str = "none") -> dict[str, Any]:
    """The chart values the sandbox renders with for ``allocation_mode`` and ``queueing``
    (``kueue``: ``queueing.mode``, so that the controller's and the API's RBAC cover Kueue's objects)."""
    return (SANDBOX_DRA_VALUES if allocation_mode == "dra" else SANDBOX_VALUES) | chart_values(queueing)


TOKEN_SECONDS = 30 * 24 * 3600


@dataclass(frozen=True)
class Identity:
    """A process's Kubernetes identity: who it is and the kubeconfig it runs with."""

    name: str  # the process (api, controller, ...)
    user: str  # the Kubernetes user name it authenticates as
    kubeconfig: Path


#: the component label of ``helm test``'s ServiceAccount and Role (templates/tests/rbac.yaml)
HELM_TEST_COMPONENT = "helm-test"


def cluster_side(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The chart's cluster-side objects, its namespace first (``helm install --create-namespace``);
    not its hooks (the migration Job's identity) nor ``helm test``'s identity: no process of the
    sandbox runs as either, and each identity here is one the sandbox waits to hear from."""
    objects = [
        o
        for o in chart.render(values if values is not None else SANDBOX_VALUES)
        if o["kind"] in CLUSTER_SIDE_KINDS
        and not chart.is_hook(o)
        and (o["metadata"].get("labels") or {}).get("app.kubernetes.io/component") != HELM_TEST_COMPONENT
    ]
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": chart.NAMESPACE}}
    order = {k: i for i, k in enumerate(CLUSTER_SIDE_KINDS)}
    return [namespace, *sorted(objects, key=lambda o: order[o["kind"]])]


def service_accounts(objects: list[dict[str, Any]]) -> dict[str, str]:
    """component (``api``, ``controller``, ...) -> its ServiceAccount's name."""
    return {chart.component(o): o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"}


def write_token_file(path: Path, nodes: tuple[str, ...]) -> dict[str, str]:
    """kube-apiserver static tokens for the nodes' users (``system:node:<name>`` in ``system:nodes``,
    as each real kubelet's client certificate names it): the sandbox's RBAC audit knows the
    kubelets by these identities; returns user -> token.

    Tokens already in the file are kept, so a restarted sandbox keeps its identities.
    """
    users: dict[str, tuple[str, str]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split(",", 3)
            if len(parts) >= 3:
                users[parts[1]] = (parts[0], parts[3] if len(parts) > 3 else "")
    wanted = {f"system:node:{n}": '"system:nodes"' for n in nodes}
    for user, groups in wanted.items():
        if user not in users:
            users[user] = (secrets.token_urlsafe(32), groups)
    path.write_text("".join(f"{tok},{user},{user},{groups}\n" for user, (tok, groups) in users.items()))
    path.chmod(0o600)
    return {user: tok for user, (tok, _) in users.items()}


def mint_token(admin_kubeconfig: Path, namespace: str, service_account: str, *, node: str | None = None) -> str:
    """A token of ``namespace/service_account`` from TokenRequest, as the admin asks for it.

    With ``node``, the token is bound to that Node object, as the kubelet binds a DaemonSet
    pod's projected token to its pod and node: kube-apiserver then knows which node the
    caller runs on (the ``associated-node`` verbs a DRA driver's status writes need)."""
    from kubernetes import client

    from core.kube import new_api_client

    with new_api_client(admin_kubeconfig) as api:
        spec: dict[str, Any] = {"expirationSeconds": TOKEN_SECONDS}
        if node is not None:
            metadata = client.CoreV1Api(api).read_node(node).metadata
            uid = metadata.uid if metadata else None
            spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        core = client.CoreV1Api(api)
        out = core.create_namespaced_service_account_token(service_account, namespace, request)  # type: ignore[arg-type]  # a plain dict body
    if out.status is None or not out.status.token:
        raise RuntimeError(f"no token for the ServiceAccount {namespace}/{service_account}")
    return out.status.token


def write_kubeconfig(admin_kubeconfig: Path, path: Path, user: str, token: str) -> Path:
    """A kubeconfig like the admin's (same server and CA) that authenticates with ``token``."""
    doc = yaml.safe_load(admin_kubeconfig.read_text())
    context = doc["contexts"][0]["context"]
    doc["users"] = [{"name": user, "user": {"token": token}}]
    context["user"] = user
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(0o600)
    return path


class RBACRefused(RuntimeError):
    """A gpucaas process was refused by RBAC: the chart lacks a permission it uses."""


def _decision(event: dict[str, Any]) -> dict[str, Any]:
    """One kube-apiserver audit event (``audit.k8s.io/v1``) as who asked, whether it was
    allowed, and the authoriser's words when it was not."""
    user = (event.get("user") or {}).get("username", "")
    allowed = (event.get("annotations") or {}).get("authorization.k8s.io/decision") != "forbid"
    ref = event.get("objectRef") or {}
    what = (
        f'resource "{ref.get("resource", "")}'
        + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        + f'" in API group "{ref.get("apiGroup", "")}"'
        + (f' in the namespace "{ref["namespace"]}"' if ref.get("namespace") else "")
        if ref
        else f'path "{event.get("requestURI", "")}"'
    )
    reason = (event.get("annotations") or {}).get("authorization.k8s.io/reason", "")
    # the server's own answer when it has one (``<resource> is forbidden: User ... cannot ...``)
    message = (event.get("responseStatus") or {}).get("message") or (
        f'User "{user}" cannot {event.get("verb", "")} {what}' + (f" ({reason})" if reason else "")
    )
    out = {"user": user, "allowed": allowed, "verb": event.get("verb", ""), "message": message}
    if ref:
        out.update(
            group=ref.get("apiGroup", ""),
            resource=ref.get("resource", ""),
            subresource=ref.get("subresource", ""),
            object=(ref.get("apiGroup", ""), ref.get("resource", ""), ref.get("namespace", ""), ref.get("name", "")),
        )
    return out


def audit_entries(audit_log: Path) -> list[dict[str, Any]]:
    """kube-apiserver's authorisation decisions so far, from its audit log (one event a line)."""
    import json

    if not audit_log.exists():
        return []
    out = []
    for line in audit_log.read_text().splitlines():
        try:
            out.append(_decision(json.loads(line)))
        except ValueError:  # a line being written
            continue
    return out


#: a list and a watch of the same objects are one read (a reflector's watch-list retries a
#: list); a get is granted on its own, so it is not among them
READ_VERBS = frozenset({"list", "watch"})


def refusals(audit_log: Path, users: set[str]) -> list[dict[str, Any]]:
    """The requests of ``users`` that the authorisers refused and never allowed afterwards.

    kube-apiserver's authorisers answer from caches: the Node authorizer's graph links a node
    to a claim a moment after the pod naming it is bound, and RBAC sees a RoleBinding (the
    controller's grant of the API's Secret rights in a new tenant namespace) a moment after it
    is created. A request refused in that moment and allowed when retried (same user, verb and
    object) is the cache catching up; a permission the chart lacks is never allowed later.
    A list and a watch count as one read: the kubelet's reflector may retry a refused list of
    a pod's Secret as a watch (its watch-list), on the same object.
    A node's request about an object that was deleted (by anyone, one by one or with its
    namespace's collection) is not counted either: the Node authorizer drops a pod from its
    graph when the pod goes, and the kubelet may still read it once after (no permission
    would have allowed that read)."""
    entries = audit_entries(audit_log)
    deleted: set[Any] = set()
    for e in entries:
        if e["allowed"] and e["verb"] in ("delete", "deletecollection") and e.get("object") is not None:
            deleted.add(e["object"] if e["verb"] == "delete" else e["object"][:3])
    later_allowed: set[tuple[str, str, Any]] = set()
    out: list[dict[str, Any]] = []
    for e in reversed(entries):
        obj = e.get("object")
        verb = "read" if e["verb"] in READ_VERBS else e["verb"]
        key = (e["user"], verb, obj)
        if e["allowed"]:
            later_allowed.add(key)
            if obj is not None:  # a refused create names no object (its body was never read)
                later_allowed.add((e["user"], verb, (*obj[:3], "")))
        elif e["user"] in users and key not in later_allowed and not _gone_from_node(e, deleted):
            out.append(e)
    return list(reversed(out))


def check_no_refusals(audit_log: Path, ids: dict[str, Identity], *, settle_timeout: float = 60.0) -> None:
    """Wait until every identity has talked to the API server, then fail on any RBAC refusal.

    Raises :class:`RBACRefused` naming each refused permission with the server's own 403
    message (``User "..." cannot <verb> resource "<resource>" in API group "<group>" ...``).
    """
    from devtools.waiting import WaitTimeout, wait_for

    users = {i.user for i in ids.values()}
    try:
        wait_for(
            lambda: users <= {e["user"] for e in audit_entries(audit_log)},
            settle_timeout,
            interval=0.2,
            what="every gpucaas process to reach the Kubernetes API",
        )
    except WaitTimeout:
        pass  # a silent process is not an RBAC failure; report what was refused
    refused = refusals(audit_log, users)
    if refused:
        lines = sorted({e.get("message", str(e)) for e in refused})
        raise RBACRefused(
            "the chart's RBAC refused gpucaas processes (a permission is missing):\n  " + "\n  ".join(lines)
        )


def _gone_from_node(entry: dict[str, Any], deleted: set[Any]) -> bool:
    """A node's request about an object deleted (alone, or with its namespace's collection)."""
    obj = entry.get("object")
    return entry["user"].startswith("system:node:") and obj is not None and (obj in deleted or obj[:3] in deleted)
