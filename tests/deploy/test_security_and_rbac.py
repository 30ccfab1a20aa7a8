"""Least privilege: what each component may touch on the node and in the API.

The tenant-facing API (Deployment, Service, Ingress) and every pod the chart runs
are checked for privilege; each component's RBAC rules are compared with the
table of what that component needs, nothing more.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.rendering import component, find, pod_spec, production_values, render, workloads

DRA = {"allocation": {"mode": "dra"}}
DRA_BINDING = {"allocation": {"mode": "dra"}, "draDriver": {"bindingConditions": True}}
KUEUE = {"queueing": {"mode": "kueue", "gpuInstanceType": "hgx-h100-8"}}
VALUE_SETS = {
    "defaults": {},
    "production": production_values(),
    "dra": DRA,
    "production-dra-binding-conditions": production_values() | DRA_BINDING,
    "kueue": KUEUE,
    "dra-kueue": DRA | KUEUE,
    "kueue-without-partition-check": {"queueing": {**KUEUE["queueing"], "partitionCheck": False}},
}

# (apiGroup, resource) -> verbs, per component. Cluster-wide (ClusterRole) rules.
EXPECTED_CLUSTER_RULES: dict[str, dict[tuple[str, str], set[str]]] = {
    "api": {
        ("gpucaas.dev", "tenancies"): {"get", "list", "watch", "create", "patch", "delete"},
        ("gpucaas.dev", "gpuleases"): {"get", "list"},
        ("gpucaas.dev", "gpuleases/status"): {"update"},
        ("gpucaas.dev", "fabricstates"): {"list"},
        ("gpucaas.dev", "warmimages"): {"get", "list", "create", "delete"},
        ("", "pods"): {"get", "list", "watch", "create", "delete", "patch"},
        ("", "pods/log"): {"get"},
        ("", "nodes"): {"list"},
        ("", "events"): {"list"},
    },
    "controller": {
        ("gpucaas.dev", "tenancies"): {"get", "list", "watch", "patch"},
        ("gpucaas.dev", "tenancies/status"): {"patch"},
        ("gpucaas.dev", "tenancies/finalizers"): {"update"},
        ("gpucaas.dev", "gpuleases"): {"get", "list", "watch", "patch"},
        ("gpucaas.dev", "warmimages"): {"list", "watch", "create", "patch", "delete"},
        ("gpucaas.dev", "gpuleases/status"): {"update"},
        **{
            ("", r): {"get", "list", "watch", "create", "update", "delete"}
            for r in ("namespaces", "resourcequotas", "limitranges", "persistentvolumeclaims", "persistentvolumes")
        },
        ("networking.k8s.io", "networkpolicies"): {"get", "list", "watch", "create", "update", "delete"},
        ("cilium.io", "ciliumnetworkpolicies"): {"get", "list", "watch", "create", "update", "delete"},
        ("", "pods"): {"get", "list", "delete"},
        ("", "events"): {"create"},
        ("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"},
        ("kopf.dev", "clusterkopfpeerings"): {"get", "list", "watch", "create", "patch"},
        ("rbac.authorization.k8s.io", "rolebindings"): {"get", "create", "update", "delete"},
        ("rbac.authorization.k8s.io", "clusterroles"): {"bind"},
    },
    "device-plugin": {
        ("gpucaas.dev", "gpuleases"): {"get", "list", "watch", "create"},
        ("gpucaas.dev", "gpuleases/status"): {"update"},
        ("", "pods"): {"get"},
    },
    "fabric": {
        ("gpucaas.dev", "fabricstates"): {"get", "create"},
        ("gpucaas.dev", "fabricstates/status"): {"patch"},
        # Fabric reset: the lost holders' GPU leases get a condition, the pods an Event,
        # and with fabric.fabricResetPolicy=evict an Eviction (docs/fabric-manager.md).
        ("gpucaas.dev", "gpuleases"): {"get"},
        ("gpucaas.dev", "gpuleases/status"): {"update"},
        ("", "events"): {"create"},
        ("", "pods/eviction"): {"create"},
    },
    "scheduler-extender": {
        ("", "pods"): {"get", "list", "watch"},
        ("gpucaas.dev", "fabricstates"): {"list", "watch"},
        ("gpucaas.dev", "gpuleases"): {"list", "watch"},
        ("", "bindings"): {"create"},
        ("", "nodes"): {"patch"},  # announces freed GPUs to kube-scheduler (an annotation)
    },
}
#: allocation.mode=dra: the DRA driver instead of the device plugin (services/dra_driver: it lists,
#: creates, replaces and deletes its node's slices, reads the claims it prepares and its node's
#: GPU leases) and the controller's claim templates. Binding conditions add listing claims and
#: writing status.devices (resourceclaims/status and, from Kubernetes 1.36, the synthetic
#: resourceclaims/driver with the node-aware verb; "Hardening Guide - Dynamic Resource Allocation").
DRA_DRIVER_RULES: dict[tuple[str, str], set[str]] = {
    ("resource.k8s.io", "resourceslices"): {"list", "create", "update", "delete"},
    ("resource.k8s.io", "resourceclaims"): {"get", "list"},
    # the GPU-lease agent beside the driver (devicePlugin.leases.enabled), as the device plugin's
    ("gpucaas.dev", "gpuleases"): {"get", "list", "watch", "create"},
    ("gpucaas.dev", "gpuleases/status"): {"update"},
    ("", "pods"): {"get"},
    # the PartitionActivated Event on the pod whose claim's partition it activated
    ("", "events"): {"create"},
    # its node's GPU count as nvidia.com/gpu in the Node's status capacity (services/dra_driver/capacity.py)
    ("", "nodes"): {"get"},
    ("", "nodes/status"): {"patch"},
}
DRA_BINDING_RULES: dict[tuple[str, str], set[str]] = {
    ("resource.k8s.io", "resourceclaims"): {"get", "list"},
    ("resource.k8s.io", "resourceclaims/status"): {"update"},
    ("resource.k8s.io", "resourceclaims/driver"): {"associated-node:update"},
}
CONTROLLER_DRA_RULES: dict[tuple[str, str], set[str]] = {
    ("resource.k8s.io", "resourceclaimtemplates"): {"get", "list", "watch", "create", "update", "delete"},
}


#: queueing.mode=kueue: the controller keeps each Tenancy's ClusterQueue and LocalQueue (deleted
#: with it) and, shared and never deleted, the GPU nodes' ResourceFlavor, the container classes'
#: WorkloadPriorityClasses and the Cohort holding the pool, which it sums from the watched nodes
#: (services/tenancy_controller/queues.py, pool.py).
CONTROLLER_KUEUE_RULES: dict[tuple[str, str], set[str]] = {
    ("kueue.x-k8s.io", "clusterqueues"): {"get", "list", "watch", "create", "update", "delete"},
    ("kueue.x-k8s.io", "localqueues"): {"get", "list", "watch", "create", "update", "delete"},
    ("kueue.x-k8s.io", "resourceflavors"): {"get", "list", "watch", "create", "update"},
    ("kueue.x-k8s.io", "workloadpriorityclasses"): {"get", "list", "watch", "create", "update"},
    ("kueue.x-k8s.io", "cohorts"): {"get", "list", "watch", "create", "update"},
    ("", "nodes"): {"list", "watch"},
}

#: queueing.mode=kueue: the API reads a tenancy's Workloads for its containers' queue positions.
API_KUEUE_RULES: dict[tuple[str, str], set[str]] = {("kueue.x-k8s.io", "workloads"): {"list"}}

#: queueing.partitionCheck (on by default with Kueue): the controller keeps the AdmissionCheck like
#: the flavor; the extender answers it: it watches the Workloads, writes its own entry of their
#: status.admissionChecks and marks the AdmissionCheck Active (services/placement/admission_check.py).
CONTROLLER_PARTITION_CHECK_RULES: dict[tuple[str, str], set[str]] = {
    ("kueue.x-k8s.io", "admissionchecks"): {"get", "list", "watch", "create", "update"},
}
EXTENDER_PARTITION_CHECK_RULES: dict[tuple[str, str], set[str]] = {
    ("kueue.x-k8s.io", "workloads"): {"list", "watch"},
    ("kueue.x-k8s.io", "clusterqueues"): {"list", "watch"},
    ("kueue.x-k8s.io", "workloads/status"): {"patch"},
    ("kueue.x-k8s.io", "admissionchecks/status"): {"patch"},
    ("kueue.x-k8s.io", "admissionchecks"): {"get"},
    # the condition gpucaas.dev/PreemptedForGuarantee on a pod preempted for a guarantee
    ("", "pods/status"): {"patch"},
}


def _partition_check(values: dict[str, Any]) -> bool:
    queueing = values.get("queueing", {})
    return bool(queueing.get("mode") == "kueue" and queueing.get("partitionCheck", True))


def expected_namespaced_rules(values: dict[str, Any]) -> dict[str, dict[tuple[str, str], set[str]]]:
    """EXPECTED_NAMESPACED_RULES, and with the partition check the extender's Lease (one replica answers)."""
    if not _partition_check(values):
        return EXPECTED_NAMESPACED_RULES
    return EXPECTED_NAMESPACED_RULES | {
        "scheduler-extender": {("coordination.k8s.io", "leases"): {"get", "update", "create"}},
    }


def expected_cluster_rules(values: dict[str, Any]) -> dict[str, dict[tuple[str, str], set[str]]]:
    """EXPECTED_CLUSTER_RULES for the allocation mode and the queueing ``values`` choose."""
    rules = _allocation_rules(values)
    if values.get("queueing", {}).get("mode") == "kueue":
        rules = rules | {
            "controller": rules["controller"] | CONTROLLER_KUEUE_RULES,
            "api": rules["api"] | API_KUEUE_RULES,
        }
        if _partition_check(values):
            rules |= {
                "controller": rules["controller"] | CONTROLLER_PARTITION_CHECK_RULES,
                "scheduler-extender": rules["scheduler-extender"] | EXTENDER_PARTITION_CHECK_RULES,
            }
    return rules


def _allocation_rules(values: dict[str, Any]) -> dict[str, dict[tuple[str, str], set[str]]]:
    if values.get("allocation", {}).get("mode") != "dra":
        return EXPECTED_CLUSTER_RULES
    rules = {k: v for k, v in EXPECTED_CLUSTER_RULES.items() if k != "device-plugin"}
    rules["controller"] = EXPECTED_CLUSTER_RULES["controller"] | CONTROLLER_DRA_RULES
    rules["dra-driver"] = DRA_DRIVER_RULES | (
        DRA_BINDING_RULES if values.get("draDriver", {}).get("bindingConditions") else {}
    )
    # the API counts the nodes' GPUs from the DRA driver's slices (/v1/admin/nodes) and reads a
    # bound pod's claim before its start (reserved for it, or the pod is made again)
    rules["api"] = EXPECTED_CLUSTER_RULES["api"] | {
        ("resource.k8s.io", "resourceslices"): {"list"},
        ("resource.k8s.io", "resourceclaims"): {"get"},
    }
    # the extender only scores nodes: the scheduler's DRA plugin allocates and binds
    rules["scheduler-extender"] = {
        k: v
        for k, v in EXPECTED_CLUSTER_RULES["scheduler-extender"].items()
        if k not in (("", "bindings"), ("", "nodes"))
    }
    return rules


TENANT_SECRETS = "gpucaas-api-tenant-secrets"
# Kopf peering is cluster-wide (ClusterKopfPeering): the namespaced Roles are `helm test`'s,
# which reads the controller's Deployment (that one, by name) to see it Ready, and the
# controller's, which keeps the warm-image DaemonSet (that one, by name; create takes no name).
EXPECTED_NAMESPACED_RULES: dict[str, dict[tuple[str, str], set[str]]] = {
    "helm-test": {("apps", "deployments"): {"get"}},
    "controller": {("apps", "daemonsets"): {"get", "create", "update", "delete"}},
}

# hostPath -> must it be read-only, per component. Nothing else from the host.
EXPECTED_HOST_PATHS: dict[str, dict[str, bool]] = {
    "device-plugin": {
        "/var/lib/kubelet/device-plugins": False,
        "/var/lib/kubelet/pod-resources": True,
        "/var/run/cdi": False,
        "/dev/vfio": True,
        "/sys": False,  # writes: the ROM enable word and the GPU reset before the firmware check
        "/run/gpucaas": False,
    },
    "dra-driver": {
        "/var/lib/kubelet/plugins": False,  # creates <plugins>/gpu.gpucaas.dev/dra.sock
        "/var/lib/kubelet/plugins_registry": False,  # creates its registration socket
        "/var/run/cdi": False,
        "/dev/vfio": True,
        "/sys": False,  # the lease agent's firmware check, as beside the device plugin
        "/var/lib/gpucaas/dra": False,  # the checkpoint of prepared claims
        "/run/gpucaas": False,
    },
    "fabric": {
        "/var/run/libvirt": True,
        "/sys": False,  # writes: the GPU reset (reset, reset_method) before a partition is activated
        "/run/gpucaas": False,
        "/var/lib/gpucaas/images": True,
        "/var/lib/gpucaas/fabric": False,
    },
}


def _flatten(rules: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    flat: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        assert "resourceNames" not in rule or rule["resourceNames"], rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                flat.setdefault((group, resource), set()).update(rule["verbs"])
    return flat


@pytest.mark.parametrize("values_name", list(VALUE_SETS), ids=list(VALUE_SETS))
def test_rbac_is_exactly_what_each_component_needs(values_name: str) -> None:
    objects = render(VALUE_SETS[values_name] | {"schedulerExtender": {"enabled": True}})
    expected_rules = expected_cluster_rules(VALUE_SETS[values_name])
    tenant_secrets = [o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == TENANT_SECRETS]
    cluster_roles = {component(o): o for o in objects if o["kind"] == "ClusterRole" and o not in tenant_secrets}
    roles = {component(o): o for o in objects if o["kind"] == "Role"}
    assert set(cluster_roles) == set(expected_rules)
    expected_roles = expected_namespaced_rules(VALUE_SETS[values_name])
    assert set(roles) == set(expected_roles)
    for name, expected in expected_rules.items():
        rules = cluster_roles[name]["rules"]
        flat = _flatten(rules)
        assert flat == expected, f"{name}: {flat} != {expected}"
        for rule in rules:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]
            if rule["resources"] == ["clusterroles"]:  # the controller binds the API's tenant-secrets role, only it
                assert (name, rule["verbs"], rule["resourceNames"]) == ("controller", ["bind"], [TENANT_SECRETS])
                continue
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])
        assert not any(res == "secrets" for _, res in flat), f"{name} may not touch Secrets"
        assert ("", "pods/exec") not in flat and ("", "nodes/proxy") not in flat
    for name, expected in expected_roles.items():
        assert _flatten(roles[name]["rules"]) == expected
        assert all(rule.get("resourceNames") or rule["verbs"] == ["create"] for rule in roles[name]["rules"]), name
    # Secrets, volume claims and exec only in tenant namespaces: the role exists, and nothing in the
    # chart binds it (the controller binds it per tenant namespace, see services/tenancy_controller/builders.py)
    assert [_flatten(r["rules"]) for r in tenant_secrets] == [
        {
            ("", "secrets"): {"get", "list", "create", "update", "delete"},
            ("", "persistentvolumeclaims"): {"list", "create", "delete"},
            ("", "pods/exec"): {"get", "create"},
            ("", "services"): {"create", "delete"},
            ("networking.k8s.io", "ingresses"): {"create", "delete"},
            ("cilium.io", "ciliumnetworkpolicies"): {"create", "delete"},
        }
    ]
    assert not [o for o in objects if o["kind"].endswith("Binding") and o["roleRef"]["name"] == TENANT_SECRETS]
    controller_env = {
        e["name"]: e.get("value")
        for e in pod_spec(find(objects, "Deployment", "gpucaas-controller"))["containers"][0]["env"]
    }
    assert controller_env["GPUCAAS_CONTROLLER_API_SECRETS_CLUSTER_ROLE"] == TENANT_SECRETS
    assert controller_env["GPUCAAS_CONTROLLER_API_SERVICE_ACCOUNT"] == "gpucaas-system/gpucaas-api"
    # each binding ties one component's role to that component's own ServiceAccount
    for binding in (o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        name = component(binding)
        assert binding["roleRef"]["name"] == f"gpucaas-{name}"
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": f"gpucaas-{name}", "namespace": "gpucaas-system"}
        ]
    for workload in workloads(objects):
        assert pod_spec(workload)["serviceAccountName"] == f"gpucaas-{component(workload)}"


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return spec.get("initContainers", []) + spec["containers"]


def _effective(spec: dict[str, Any], container: dict[str, Any], key: str) -> Any:
    own = container.get("securityContext", {})
    return own[key] if key in own else spec.get("securityContext", {}).get(key)


@pytest.mark.parametrize("values_name", list(VALUE_SETS), ids=list(VALUE_SETS))
def test_no_tenant_facing_object_is_privileged(values_name: str) -> None:
    objects = render(VALUE_SETS[values_name] | {"schedulerExtender": {"enabled": True}})
    api = find(objects, "Deployment", "gpucaas-api")
    spec = pod_spec(api)
    assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC")
    assert all("hostPath" not in v for v in spec.get("volumes", []))
    for c in _containers(spec):
        assert _effective(spec, c, "privileged") in (False, None)
        assert _effective(spec, c, "allowPrivilegeEscalation") is False
        assert _effective(spec, c, "runAsNonRoot") is True
        assert _effective(spec, c, "readOnlyRootFilesystem") is True
        assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert _effective(spec, c, "seccompProfile") == {"type": "RuntimeDefault"}
        assert "hostPort" not in str(c.get("ports"))
    # the tenant-facing Service exposes the API port only; the Ingress terminates TLS
    service = find(objects, "Service", "gpucaas-api")
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["https"]
    if VALUE_SETS[values_name].get("api", {}).get("ingress", {}).get("enabled"):
        ingress = find(objects, "Ingress", "gpucaas-api")
        assert ingress["spec"]["tls"][0]["hosts"] == [ingress["spec"]["rules"][0]["host"]]


@pytest.mark.parametrize("values_name", list(VALUE_SETS), ids=list(VALUE_SETS))
def test_no_workload_is_privileged_and_host_access_is_minimal(values_name: str) -> None:
    objects = render(VALUE_SETS[values_name] | {"schedulerExtender": {"enabled": True}})
    seen = set()
    for workload in workloads(objects):
        name = component(workload)
        seen.add(name)
        spec = pod_spec(workload)
        assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC"), name
        for c in _containers(spec):
            assert _effective(spec, c, "privileged") in (False, None), name
            assert _effective(spec, c, "allowPrivilegeEscalation") is False, name
            assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}, name
            assert _effective(spec, c, "readOnlyRootFilesystem") is True, name
            assert _effective(spec, c, "seccompProfile") == {"type": "RuntimeDefault"}, name
            if workload["kind"] in ("Deployment", "DaemonSet"):  # servers; a Job or a test pod runs to its end
                assert "livenessProbe" in c and "readinessProbe" in c, name
            assert set(c["resources"]) == {"requests", "limits"}, name
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        host = {v["hostPath"]["path"]: n for n, v in volumes.items() if "hostPath" in v}
        expected = EXPECTED_HOST_PATHS.get(name, {})
        assert set(host) == set(expected), f"{name} mounts {sorted(host)}"
        mounts = {m["name"]: m for c in _containers(spec) for m in c.get("volumeMounts", [])}
        for path, read_only in expected.items():
            assert mounts[host[path]].get("readOnly", False) is read_only, f"{name}: {path}"
        if name in EXPECTED_HOST_PATHS:
            assert spec["nodeSelector"] == {"gpucaas.dev/gpu-node": "true"}
    node_daemon = (
        "dra-driver" if VALUE_SETS[values_name].get("allocation", {}).get("mode") == "dra" else "device-plugin"
    )
    # beside the services: the migration hook Job and the `helm test` pods
    assert seen == {"api", "controller", node_daemon, "fabric", "scheduler-extender", "migrate", "helm-test"}


def test_fabric_runs_non_root_in_the_libvirt_group_when_told() -> None:
    objects = render({"fabric": {"libvirtGroupId": 108}})
    spec = pod_spec(find(objects, "DaemonSet", "gpucaas-fabric"))
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == 65532
    assert spec["securityContext"]["supplementalGroups"] == [108]
    default = pod_spec(find(render({}), "DaemonSet", "gpucaas-fabric"))
    assert default["securityContext"]["runAsUser"] == 0
    assert default["containers"][0]["securityContext"]["privileged"] is False


def test_privileged_fabric_is_explicit_and_only_fabric() -> None:
    objects = render({"fabric": {"privileged": True}})
    fabric = find(objects, "DaemonSet", "gpucaas-fabric")
    container = pod_spec(fabric)["containers"][0]
    assert container["securityContext"]["privileged"] is True
    assert "CKV_K8S_16" in fabric["metadata"]["annotations"]["checkov.io/skip6"]
    for workload in workloads(objects):
        if workload is not fabric:
            for c in _containers(pod_spec(workload)):
                assert c["securityContext"].get("privileged") in (False, None)


def test_pdbs_and_network_policies_cover_the_services() -> None:
    objects = render(production_values())
    pdbs = {component(o) for o in objects if o["kind"] == "PodDisruptionBudget"}
    assert pdbs == {"api", "controller", "scheduler-extender"}
    policies = {component(o): o for o in objects if o["kind"] == "NetworkPolicy"}
    components = {"api", "controller", "device-plugin", "fabric", "scheduler-extender", "migrate", "helm-test"}
    assert set(policies) == components
    assert policies["controller"]["spec"]["ingress"] == []
    assert policies["api"]["spec"]["ingress"][0]["from"][0]["namespaceSelector"]
    assert policies["api"]["spec"]["ingress"][0]["ports"] == [{"port": 8443, "protocol": "TCP"}]
