"""The controller against the local cluster's kube-apiserver over HTTP: create, change, repair, delete."""

from __future__ import annotations

import pytest

from services.tenancy_controller import builders, policies, reconcile
from services.tenancy_controller.comparison import is_subset
from services.tenancy_controller.spec import parse_tenancy

from .conftest import wait_for
from .factories import new_tenancy
from .helpers import conditions, create_pod, merge_patch, status, wait_phase

NFS = {"server": "10.20.0.5", "path": "/exports/acme", "capacity": "2Ti"}


def expected_children(tenancy: dict) -> list[dict]:
    """What the builders say the Tenancy owns (with the server-side uid)."""
    return reconcile.reconcile_tenancy(tenancy, network=policies.NetworkConfig()).objects


def assert_child_as_built(api, desired: dict) -> dict:
    meta = desired["metadata"]
    live = api.get(desired["kind"], meta["name"], meta.get("namespace"))
    assert live is not None, f"{desired['kind']} {meta['name']} missing"
    assert live["apiVersion"] == desired["apiVersion"]
    for key, value in meta["labels"].items():
        assert live["metadata"]["labels"][key] == value, (desired["kind"], key)
    assert live["metadata"].get("ownerReferences") == meta.get("ownerReferences"), desired["kind"]
    for field in desired:
        if field in ("apiVersion", "kind", "metadata"):
            continue
        for key, value in desired[field].items():
            # as the controller compares (zero values absent: the built-in kinds' omitempty)
            assert is_subset({key: value}, live[field]), f"{desired['kind']}.{field}.{key}"
    return live


def test_create_reaches_ready_with_every_child_as_specified(api, controller):
    api.create(new_tenancy("acme", gpu_quota=4, pod_quota=10, allow_internet=True, nfs=NFS))
    tenancy = wait_phase(api, "acme", "Ready")

    st = tenancy["status"]
    assert st["namespace"] == "tenant-acme"
    assert st["observedGeneration"] == tenancy["metadata"]["generation"]
    conds = conditions(tenancy)
    assert set(conds) == {"Ready", "NamespaceReady", "NetworkPolicyReady", "QuotaReady", "StorageReady"}
    for cond in conds.values():
        assert cond["status"] == "True", cond
        assert cond["lastTransitionTime"].endswith("Z") and cond["reason"] and cond["message"]
    assert "gpucaas.dev/controller" in tenancy["metadata"]["finalizers"]

    children = expected_children(tenancy)
    assert [c["kind"] for c in children] == [
        "Namespace",
        "CiliumNetworkPolicy",
        "NetworkPolicy",
        "ResourceQuota",
        "LimitRange",
        "PersistentVolume",
        "PersistentVolumeClaim",
    ]
    live = {c["kind"]: assert_child_as_built(api, c) for c in children}

    owner = live["Namespace"]["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Tenancy", "acme", tenancy["metadata"]["uid"])
    assert live["Namespace"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert live["ResourceQuota"]["spec"]["hard"]["requests.nvidia.com/gpu"] == "4"
    assert live["ResourceQuota"]["spec"]["hard"]["pods"] == "10"
    nfs = live["PersistentVolume"]["spec"]["nfs"]
    assert (nfs["server"], nfs["path"], nfs.get("readOnly", False)) == ("10.20.0.5", "/exports/acme", False)
    assert live["PersistentVolume"]["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert live["PersistentVolumeClaim"]["metadata"]["name"] == "tenant-storage"
    assert live["PersistentVolumeClaim"]["spec"]["volumeName"] == "tenant-acme-storage"
    egress = live["CiliumNetworkPolicy"]["spec"]["egress"]
    assert {"toCIDR": ["10.20.0.5/32"], "toPorts": egress[-1]["toPorts"]} == egress[-1]
    assert "toCIDRSet" in egress[2]


def test_spec_change_is_reconciled_into_the_children(api, controller):
    api.create(new_tenancy("beta", gpu_quota=2))
    wait_phase(api, "beta", "Ready")
    assert api.get("PersistentVolume", "tenant-beta-storage") is None
    cnp = api.get("CiliumNetworkPolicy", "tenant-isolation", "tenant-beta")
    assert len(cnp["spec"]["egress"]) == 2  # same namespace + DNS only

    merge_patch(api, "beta", {"spec": {"gpuQuota": 16, "network": {"allowInternet": True}, "nfs": NFS}})
    tenancy = wait_phase(api, "beta", "Ready", generation=2)
    for child in expected_children(tenancy):
        assert_child_as_built(api, child)
    assert api.get("ResourceQuota", "tenant-quota", "tenant-beta")["spec"]["hard"]["requests.nvidia.com/gpu"] == "16"
    assert api.get("PersistentVolumeClaim", "tenant-storage", "tenant-beta") is not None

    merge_patch(api, "beta", {"spec": {"nfs": None, "network": {"allowInternet": False}}})
    tenancy = wait_phase(api, "beta", "Ready", generation=3)
    assert conditions(tenancy)["StorageReady"]["reason"] == "NotRequested"
    # deleted; gone once kube-controller-manager's pvc- and pv-protection let them go
    wait_for(lambda: api.get("PersistentVolumeClaim", "tenant-storage", "tenant-beta") is None, what="PVC gone")
    wait_for(lambda: api.get("PersistentVolume", "tenant-beta-storage") is None, what="PV gone")
    for child in expected_children(tenancy):
        assert_child_as_built(api, child)


@pytest.mark.parametrize(
    "kind,name,namespaced",
    [
        ("CiliumNetworkPolicy", "tenant-isolation", True),
        ("NetworkPolicy", "tenant-isolation", True),
        ("ResourceQuota", "tenant-quota", True),
        ("LimitRange", "tenant-limits", True),
        ("PersistentVolumeClaim", "tenant-storage", True),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_child_deleted_by_hand_is_restored(api, controller, kind, name, namespaced):
    api.create(new_tenancy("gamma", nfs=NFS))
    tenancy = wait_phase(api, "gamma", "Ready")
    ns = "tenant-gamma" if namespaced else None
    before = api.get(kind, name, ns)
    api.delete(kind, name, ns)
    restored = wait_for(
        lambda: (o := api.get(kind, name, ns)) and o["metadata"]["uid"] != before["metadata"]["uid"] and o,
        what=f"{kind} {name} restored",
    )
    desired = next(c for c in expected_children(tenancy) if c["kind"] == kind)
    assert reconcile.matches(desired, restored)
    if kind == "PersistentVolumeClaim":  # and bound again to the tenancy's volume
        wait_for(
            lambda: (api.get(kind, name, ns).get("status") or {}).get("phase") == "Bound",
            what="the restored claim bound to the tenancy's PersistentVolume",
        )


def test_bound_volume_deleted_by_hand_stays_while_its_claim_exists(api, controller):
    """Kubernetes holds a bound PersistentVolume's deletion (pv-protection) while its claim exists:
    the tenancy's storage keeps working, and the claim stays Bound."""
    api.create(new_tenancy("gamma", nfs=NFS))
    wait_phase(api, "gamma", "Ready")
    # Ready does not wait for kube-controller-manager's binder: the volume is bound a moment later
    wait_for(
        lambda: api.get("PersistentVolumeClaim", "tenant-storage", "tenant-gamma")["status"].get("phase") == "Bound",
        what="the claim bound",
    )
    api.delete("PersistentVolume", "tenant-gamma-storage")
    pv = wait_for(
        lambda: (
            (o := api.get("PersistentVolume", "tenant-gamma-storage")) and o["metadata"].get("deletionTimestamp") and o
        ),
        what="the volume's deletion held",
    )
    assert "kubernetes.io/pv-protection" in pv["metadata"]["finalizers"]
    assert api.get("PersistentVolumeClaim", "tenant-storage", "tenant-gamma")["status"]["phase"] == "Bound"


def test_child_edited_by_hand_is_put_back(api, controller):
    api.create(new_tenancy("delta", gpu_quota=3))
    wait_phase(api, "delta", "Ready")
    quota = api.get("ResourceQuota", "tenant-quota", "tenant-delta")
    quota["spec"]["hard"]["requests.nvidia.com/gpu"] = "1000"
    api.replace(quota)
    policy = api.get("CiliumNetworkPolicy", "tenant-isolation", "tenant-delta")
    policy["spec"]["egress"].append({"toEntities": ["world"]})
    api.replace(policy)
    wait_for(
        lambda: (
            api.get("ResourceQuota", "tenant-quota", "tenant-delta")["spec"]["hard"]["requests.nvidia.com/gpu"] == "3"
        ),
        what="quota put back",
    )
    wait_for(
        lambda: len(api.get("CiliumNetworkPolicy", "tenant-isolation", "tenant-delta")["spec"]["egress"]) == 2,
        what="policy put back",
    )


def test_namespace_deleted_by_hand_is_recreated_with_its_children(api, controller):
    api.create(new_tenancy("eps"))
    wait_phase(api, "eps", "Ready")
    old_uid = api.get("Namespace", "tenant-eps")["metadata"]["uid"]
    api.delete("Namespace", "tenant-eps")
    wait_for(
        lambda: (
            (ns := api.get("Namespace", "tenant-eps"))
            and ns["metadata"]["uid"] != old_uid
            and not ns["metadata"].get("deletionTimestamp")
        ),
        what="namespace recreated",
    )
    tenancy = wait_for(
        lambda: (
            all(
                api.get(c["kind"], c["metadata"]["name"], c["metadata"].get("namespace"))
                for c in expected_children(api.get("Tenancy", "eps"))
            )
            and api.get("Tenancy", "eps")
        ),
        what="children recreated",
    )
    for child in expected_children(tenancy):
        assert_child_as_built(api, child)
    wait_phase(api, "eps", "Ready")


def test_deletion_deletes_its_pods_waits_for_them_then_removes_what_it_made(api, controller):
    api.create(new_tenancy("zeta", nfs=NFS))
    wait_phase(api, "zeta", "Ready")
    # A finalizer stands in for a kubelet still stopping the pod: it stays after deletion.
    pod = create_pod(api, "tenant-zeta", "job-1", "zeta")
    pod["metadata"]["finalizers"] = ["test.gpucaas.dev/hold"]
    api.replace(pod)
    api.delete("Tenancy", "zeta")

    terminating = wait_phase(api, "zeta", "Terminating")
    wait_for(lambda: "job-1" in status(api, "zeta").get("message", ""), what="terminating message names the pod")
    assert terminating["metadata"]["deletionTimestamp"]
    held = wait_for(
        lambda: (p := api.get("Pod", "job-1", "tenant-zeta")) and p["metadata"].get("deletionTimestamp") and p,
        what="the controller deleted the tenancy's pod",
    )
    assert api.get("Namespace", "tenant-zeta") is not None
    assert api.get("CiliumNetworkPolicy", "tenant-isolation", "tenant-zeta") is not None

    held["metadata"]["finalizers"] = []
    api.replace(held)  # the kubelet is done: the pod goes
    wait_for(lambda: api.get("Tenancy", "zeta") is None, what="tenancy released by its finalizer")
    wait_for(lambda: api.get("Namespace", "tenant-zeta") is None, what="namespace removed")
    assert api.get("PersistentVolume", "tenant-zeta-storage") is None


def test_deletion_removes_finished_pods_too(api, controller):
    api.create(new_tenancy("theta"))
    wait_phase(api, "theta", "Ready")
    create_pod(api, "tenant-theta", "done-1", "theta")
    pod = api.get("Pod", "done-1", "tenant-theta")
    api.patch_status("Pod", "done-1", {"phase": "Succeeded"}, "tenant-theta")
    assert pod is not None
    api.delete("Tenancy", "theta")
    wait_for(lambda: api.get("Pod", "done-1", "tenant-theta") is None, what="the finished pod deleted")
    wait_for(lambda: api.get("Tenancy", "theta") is None, what="tenancy released by its finalizer")


def test_deletion_never_deletes_a_namespace_it_does_not_own(api, controller):
    api.create(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tenant-eta", "labels": {"team": "platform"}}}
    )
    api.create(new_tenancy("eta"))
    tenancy = wait_phase(api, "eta", "Ready")
    assert conditions(tenancy)["NamespaceReady"]["reason"] == "Adopted"
    ns = api.get("Namespace", "tenant-eta")
    assert "ownerReferences" not in ns["metadata"] or not ns["metadata"]["ownerReferences"]
    assert ns["metadata"]["labels"]["team"] == "platform"
    assert ns["metadata"]["labels"]["gpucaas.dev/tenancy"] == "eta"
    assert api.get("CiliumNetworkPolicy", "tenant-isolation", "tenant-eta") is not None

    api.delete("Tenancy", "eta")
    wait_for(lambda: api.get("Tenancy", "eta") is None, what="tenancy deleted")
    assert api.get("Namespace", "tenant-eta") is not None
    assert api.get("Namespace", "tenant-eta")["metadata"].get("deletionTimestamp") is None
    assert api.get("CiliumNetworkPolicy", "tenant-isolation", "tenant-eta") is None
    assert api.get("ResourceQuota", "tenant-quota", "tenant-eta") is None


def test_parse_matches_what_the_api_server_defaulted(api):
    """The CRD defaults (gpuQuota 8, podQuota 50, allowInternet false) are what the controller assumes."""
    created = api.create(new_tenancy("theta", gpu_quota=None, pod_quota=None, allow_internet=None))
    spec = parse_tenancy(created).spec
    assert (spec.gpu_quota, spec.pod_quota, spec.allow_internet, spec.nfs) == (8, 50, False, None)
    assert builders.build_resource_quota(parse_tenancy(created))["spec"]["hard"]["pods"] == "50"


@pytest.mark.cluster
def test_create_ready_and_delete_on_the_local_or_a_real_cluster(api, controller, unique_name):
    """The same path on the local cluster, or on the cluster named by $KUBECONFIG (which needs Cilium's CRDs)."""
    name = unique_name("gpucaas-e2e")
    api.create(
        new_tenancy(name, gpu_quota=1, nfs={"server": "10.20.0.5", "path": f"/exports/{name}", "capacity": "1024Gi"})
    )
    try:
        tenancy = wait_phase(api, name, "Ready", timeout=120)
        for child in expected_children(tenancy):
            meta = child["metadata"]
            assert api.get(child["kind"], meta["name"], meta.get("namespace")) is not None, child["kind"]
        ns = api.get("Namespace", f"tenant-{name}")
        assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    finally:
        api.delete("Tenancy", name)
        wait_for(lambda: api.get("Tenancy", name) is None, timeout=120, what="e2e tenancy deleted")
    # garbage-collected once its claim is gone with the namespace (kube-controller-manager's pv-protection)
    wait_for(
        lambda: api.get("PersistentVolume", builders.persistent_volume_name(name)) is None,
        timeout=120,
        what="the tenancy's PersistentVolume deleted",
    )


def test_api_secret_rights_and_cpu_memory_quota_reach_the_namespace(api, kubeconfig):
    """With the API's ServiceAccount configured, each tenant namespace gets a RoleBinding that
    lets the API keep Secrets there; the Tenancy's CPU and memory quotas reach its ResourceQuota."""
    from .conftest import ControllerThread, controller_settings

    settings = controller_settings(
        kubeconfig,
        api_service_account="gpucaas-system/gpucaas-api",
        api_secrets_cluster_role="gpucaas-api-tenant-secrets",
    )
    ctl = ControllerThread(settings).start()
    try:
        api.create(new_tenancy("sized", gpu_quota=8))
        merge_patch(api, "sized", {"spec": {"cpuQuota": "196", "memoryQuota": "1800Gi"}})
        wait_for(
            lambda: (
                (q := api.get("ResourceQuota", "tenant-quota", "tenant-sized"))
                and q["spec"]["hard"].get("limits.cpu") == "196"
            ),
            what="the CPU quota",
        )
        binding = api.get("RoleBinding", "gpucaas-api-tenant-secrets", "tenant-sized")
        assert binding["roleRef"]["name"] == "gpucaas-api-tenant-secrets"
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpucaas-api", "namespace": "gpucaas-system"}]
        hard = api.get("ResourceQuota", "tenant-quota", "tenant-sized")["spec"]["hard"]
        assert (hard["limits.memory"], hard["requests.hugepages-1Gi"]) == ("1800Gi", "1800Gi")
    finally:
        ctl.stop()


def test_queueing_by_kueue_without_kueue_says_so_and_keeps_the_rest(api, kubeconfig):
    """queueing=kueue on a cluster without Kueue's CRDs: the tenancy's namespace, policies and quota
    are made, and its status says Kueue is missing (not Ready), without a crash or a retry storm."""
    from .conftest import ControllerThread, controller_settings

    ctl = ControllerThread(controller_settings(kubeconfig, queueing="kueue")).start()
    try:
        api.create(new_tenancy("unqueued", gpu_quota=8))
        tenancy = wait_for(
            lambda: (
                (t := api.get("Tenancy", "unqueued"))
                and conditions(t).get("QueueReady", {}).get("reason") == "KueueNotInstalled"
                and t
            ),
            what="QueueReady False, KueueNotInstalled",
        )
        assert tenancy["status"]["phase"] == "Pending"
        assert "install Kueue" in tenancy["status"]["message"]
        assert all(conditions(tenancy)[c]["status"] == "True" for c in ("NamespaceReady", "NetworkPolicyReady"))
        hard = api.get("ResourceQuota", "tenant-quota", "tenant-unqueued")["spec"]["hard"]
        assert "requests.nvidia.com/gpu" not in hard and hard["pods"] == "50"
        assert ctl.thread.is_alive() and ctl.error is None
    finally:
        ctl.stop()
