"""The chart's RBAC against what each gpucaas process did in the end-to-end run (least privilege).

Every process of the sandbox runs under its own chart ServiceAccount (the chart's pods, or with
``GPUCAAS_E2E_INSTALL=processes`` each process with a token of it), and kube-apiserver's audit log
records each authorisation decision. These tests run after every other
end-to-end test (the package's conftest orders them last) and read that record:
no process was ever refused, and every permission the chart grants was used — or is
listed below with the reason the end-to-end run cannot exercise it.
"""

from __future__ import annotations

import yaml

from devtools.sandbox import chart_install, identities, runner
from gpucaas import chart

from .conftest import allocation_mode, allocation_scope_only

_DRIFT = "replaced (PUT) only when the child drifts from its Tenancy; tests/tenancy_controller covers the repair"
_NFS = "only for tenancies with NFS storage, which the end-to-end tenancies do not have"
_FABRIC_RESET = (
    "a service VM restart (a fabric reset) flags the lost holders' leases and tells their pods; "
    "tests/fabric/test_service_vm_libvirtd.py covers it against the local cluster"
)
_SECRETS = (
    "reading one secret, replacing and deleting it (the e2e run creates and lists); "
    "tests/api/test_secrets_and_registry.py covers them against the local cluster"
)
_PEERING = "Kopf peering between replicas: the sandbox runs one controller --standalone, the chart's Deployment peers"

#: Granted but not exercised by tests/e2e, with why the grant is still needed.
NOT_EXERCISED: dict[str, dict[tuple[str, str, str], str]] = {
    "controller": {
        ("", "events", "create"): "Kopf posts Events only for warnings about Tenancies; a healthy run has none",
        ("", "namespaces", "update"): _DRIFT,
        ("", "resourcequotas", "update"): _DRIFT,
        ("", "limitranges", "update"): _DRIFT,
        ("networking.k8s.io", "networkpolicies", "update"): _DRIFT,
        ("cilium.io", "ciliumnetworkpolicies", "update"): _DRIFT,
        ("gpucaas.dev", "tenancies", "get"): "the Tenancy is re-read when one of its children drifts",
        ("", "persistentvolumeclaims", "create"): _NFS,
        ("", "persistentvolumeclaims", "update"): _NFS,
        ("", "persistentvolumeclaims", "delete"): _NFS,
        ("", "persistentvolumes", "create"): _NFS,
        ("", "persistentvolumes", "update"): _NFS,
        ("", "persistentvolumes", "delete"): _NFS,
        ("gpucaas.dev", "tenancies/finalizers", "update"): (
            "children set blockOwnerDeletion on their Tenancy: required where the OwnerReferencesPermissionEnforcement "
            "admission plugin is on (not among the default admission plugins the sandbox runs)"
        ),
        ("rbac.authorization.k8s.io", "clusterroles", "bind"): (
            "kube-apiserver's RBAC escalation check asks for it when the controller binds the API's "
            "tenant-secrets role in a tenant namespace, an internal authorisation check the audit log does not record"
        ),
        ("rbac.authorization.k8s.io", "rolebindings", "update"): _DRIFT,
        ("rbac.authorization.k8s.io", "rolebindings", "delete"): (
            "only when the API's Secret rights are turned off (the controller's api_service_account unset)"
        ),
        **{("kopf.dev", "clusterkopfpeerings", verb): _PEERING for verb in ("get", "list", "watch", "create", "patch")},
        **{
            ("gpucaas.dev", "warmimages", verb): (
                "the WarmImages of the chart's warmImages value, which the sandbox leaves empty; "
                "tests/warm_images/test_controller.py covers them against the local cluster"
            )
            for verb in ("create", "patch", "delete")
        },
    },
    "api": {
        ("", "secrets", "get"): _SECRETS,
        ("", "secrets", "update"): _SECRETS,
        ("", "secrets", "delete"): _SECRETS,
        ("", "pods/exec", "create"): (
            "kube-apiserver asks for it when an exec's WebSocket upgrade arrives (the request itself is a "
            "GET, which the audit log records; AuthorizePodWebsocketUpgradeCreatePermission, on by default in "
            "v1.36), an internal authorisation check the audit log does not record"
        ),
    },
    "scheduler-extender": {
        ("", "pods", "get"): "the pod is re-read only when its Binding conflicts",
    },
    "fabric": {
        ("gpucaas.dev", "gpuleases", "get"): _FABRIC_RESET,
        ("gpucaas.dev", "gpuleases/status", "update"): _FABRIC_RESET,
        ("", "events", "create"): _FABRIC_RESET,
        ("", "pods/eviction", "create"): _FABRIC_RESET + " with fabric.fabricResetPolicy=evict",
    },
}


_BINDING = (
    "only with draDriver.bindingConditions (Kubernetes 1.36+ binding conditions); "
    "tests/dra_driver covers the binding watcher"
)
#: allocation.mode=dra grants the end-to-end run does not reach yet (added to NOT_EXERCISED only
#: where the chart granted them, i.e. when the sandbox runs in DRA mode).
DRA_NOT_EXERCISED: dict[str, dict[tuple[str, str, str], str]] = {
    "controller": {
        ("resource.k8s.io", "resourceclaimtemplates", "update"): _DRIFT,
        ("resource.k8s.io", "resourceclaimtemplates", "delete"): (
            "only when a Tenancy that does not own its namespace goes (else the namespace takes them); "
            "tests/tenancy_controller/test_dra_claim_templates.py covers it"
        ),
    },
    "dra-driver": {
        ("resource.k8s.io", "resourceslices", "delete"): (
            "only for a slice the driver no longer wants (a changed pool layout or a renamed node)"
        ),
        ("resource.k8s.io", "resourceclaims/status", "update"): _BINDING,
        ("resource.k8s.io", "resourceclaims/driver", "associated-node:update"): (
            _BINDING + "; a synthetic subresource kube-apiserver checks internally, which the audit log does not record"
        ),
    },
}


def not_exercised(granted: dict[str, set[tuple[str, str, str]]]) -> dict[str, dict[tuple[str, str, str], str]]:
    """NOT_EXERCISED, plus the DRA mode's entries for the grants the chart made."""
    out = {c: dict(r) for c, r in NOT_EXERCISED.items()}
    for component, reasons in DRA_NOT_EXERCISED.items():
        if mine := {k: v for k, v in reasons.items() if k in granted.get(component, set())}:
            out.setdefault(component, {}).update(mine)
    return out


def _chart_cluster_side(sandbox: runner.Sandbox) -> list[dict]:
    """The chart's cluster side as the sandbox installed it, in the suite's allocation mode: the
    release's own manifest (not its hooks nor its ``helm test`` identity), or the chart rendered
    with the values the processes run with."""
    if sandbox.release is None:
        return identities.cluster_side(identities.sandbox_values(allocation_mode()))
    manifest = chart_install.helm(
        sandbox.kubeconfig, "get", "manifest", chart_install.RELEASE, "-n", chart_install.NAMESPACE
    )
    return [
        o
        for o in yaml.safe_load_all(manifest)
        if o
        and o["kind"] in identities.CLUSTER_SIDE_KINDS
        and (o["metadata"].get("labels") or {}).get("app.kubernetes.io/component") != identities.HELM_TEST_COMPONENT
    ]


def _users(sandbox: runner.Sandbox) -> dict[str, str]:
    """Each gpucaas process's Kubernetes user -> its component (a component's node-bound tokens,
    ``dra-driver@<node>``, are the same ServiceAccount)."""
    if sandbox.release is None:
        return {i.user: name.split("@")[0] for name, i in sandbox.identities.items()}
    return {
        f"system:serviceaccount:{chart.NAMESPACE}:{sa}": component
        for component, sa in identities.service_accounts(_chart_cluster_side(sandbox)).items()
    }


def _granted(objects: list[dict]) -> dict[str, set[tuple[str, str, str]]]:
    """component -> {(apiGroup, resource, verb)} its ClusterRole and Role grant."""
    out: dict[str, set[tuple[str, str, str]]] = {}
    for obj in objects:
        if obj["kind"] not in ("ClusterRole", "Role"):
            continue
        grants = out.setdefault(chart.component(obj), set())
        for rule in obj.get("rules") or []:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    grants.update((group, resource, verb) for verb in rule["verbs"])
    return out


def _used(sandbox: runner.Sandbox) -> dict[str, set[tuple[str, str, str]]]:
    assert sandbox.audit_log is not None
    by_user = _users(sandbox)
    out: dict[str, set[tuple[str, str, str]]] = {}
    for entry in identities.audit_entries(sandbox.audit_log):
        name = by_user.get(entry["user"])
        if name is None or not entry["allowed"] or "resource" not in entry:
            continue
        resource = entry["resource"] + (f"/{entry['subresource']}" if entry["subresource"] else "")
        out.setdefault(name, set()).add((entry["group"], resource, entry["verb"]))
    return out


def test_no_gpucaas_process_was_refused(sandbox: runner.Sandbox) -> None:
    assert sandbox.audit_log is not None
    users = set(_users(sandbox))
    assert users
    refused = identities.refusals(sandbox.audit_log, users)
    assert not refused, "\n".join(sorted({e["message"] for e in refused}))


def test_every_process_ran_as_its_own_identity(sandbox: runner.Sandbox) -> None:
    users = {e["user"] for e in identities.audit_entries(sandbox.audit_log)}  # type: ignore[arg-type]
    service_accounts = identities.service_accounts(_chart_cluster_side(sandbox))
    assert service_accounts
    for user, component in _users(sandbox).items():
        assert user in users, f"{component} never reached the API server as {user}"
    if sandbox.release is None:
        assert set(service_accounts) <= set(sandbox.identities)
        for component, sa in service_accounts.items():
            assert sandbox.identities[component].user == f"system:serviceaccount:{chart.NAMESPACE}:{sa}"


def test_every_granted_permission_was_used(sandbox: runner.Sandbox) -> None:
    granted = full = _granted(_chart_cluster_side(sandbox))
    if allocation_scope_only():
        # only the mode's own tests ran: what the mode's chart grants beyond the device-plugin
        # chart's is checked here, the rest by the device-plugin run, which runs every test
        common = _granted(identities.cluster_side(identities.sandbox_values("device-plugin")))
        granted = {c: g - common.get(c, set()) for c, g in granted.items()}
    used = _used(sandbox)
    excused = not_exercised(full)
    unused = {
        component: sorted(grants - used.get(component, set()) - set(excused.get(component, {})))
        for component, grants in granted.items()
    }
    unused = {c: u for c, u in unused.items() if u}
    assert not unused, f"granted by the chart but never used in the end-to-end run: {unused}"
    for component, reasons in excused.items():
        assert set(reasons) <= full.get(component, set()), f"{component}: listed but not granted"
