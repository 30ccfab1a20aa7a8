"""The stand-in scheduler's DRA step against the API emulator: claims allocated first fit on
the published partitions, binding only when the driver reported the binding conditions, and
deallocated and placed elsewhere when they do not come within the binding timeout (KEP-5007)."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from gpucaas.core import dra
from gpucaas.core.kube import Kube
from gpucaas.devtools.waiting import wait_for
from gpucaas.programs.sandbox.dra_demo import dra_pod, ensure_namespace
from gpucaas.programs.sandbox.dra_scheduling import DraPlacer
from services.dra_driver.slices import PublishedGpu, build_slices

NS = "sched"
NODES = ["n1", "n2"]
GROUP, VERSION = "resource.k8s.io", "v1"


def _setup(k8s: client.ApiClient) -> tuple[client.CoreV1Api, client.CustomObjectsApi]:
    core, custom = client.CoreV1Api(k8s), client.CustomObjectsApi(k8s)
    for size in (1, *dra.NVLINK_SIZES):
        custom.create_cluster_custom_object(GROUP, VERSION, "deviceclasses", dra.device_class(size))
    for node in NODES:
        gpus = [PublishedGpu(pid, f"0000:{pid:02x}:00.0") for pid in range(1, 9)]
        for s in build_slices(node, gpus, binding_conditions=True):
            custom.create_cluster_custom_object(GROUP, VERSION, "resourceslices", s)
    ensure_namespace(core, custom, NS, sizes=(8,))
    return core, custom


def _pod_with_claim(core: client.CoreV1Api, custom: client.CustomObjectsApi, k8s: client.ApiClient,
                    name: str) -> tuple[dict[str, Any], str]:
    """A pod and the claim the resourceclaim controller would have made for it."""
    pod = k8s.sanitize_for_serialization(core.create_namespaced_pod(NS, dra_pod(name, 8)))
    claim = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceClaim",
             "metadata": {"name": f"{name}-gpus-abcde", "namespace": NS},
             "spec": dra.claim_template(8, NS)["spec"]["spec"]}
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, "resourceclaims", claim)
    pod["status"] = {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": claim["metadata"]["name"]}]}
    return pod, claim["metadata"]["name"]


def _claim(custom: client.CustomObjectsApi, name: str) -> dict[str, Any]:
    return custom.get_namespaced_custom_object(GROUP, VERSION, NS, "resourceclaims", name)


def test_binds_only_after_the_binding_conditions_and_moves_on_after_the_timeout(k8s: client.ApiClient) -> None:
    core, custom = _setup(k8s)
    placer = DraPlacer(Kube.of(k8s), binding_timeout_s=0.5)

    first, first_claim = _pod_with_claim(core, custom, k8s, "first")
    node, why = placer.place(first, NODES)
    assert node is None and "waiting for binding conditions on n1" in why
    claim = _claim(custom, first_claim)
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["pool"], result["device"]) == ("n1", "nvlink-8gpu-p0")
    assert result["bindingConditions"] == [dra.BINDING_CONDITION]
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "first", "uid": first["metadata"]["uid"]}]
    # the driver reports the partition active: now the pod binds to n1
    claim["status"]["devices"] = [{"driver": dra.DRIVER, "pool": "n1", "device": "nvlink-8gpu-p0", "conditions": [
        {"type": dra.BINDING_CONDITION, "status": "True", "reason": "PartitionActive", "message": "",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]
    custom.replace_namespaced_custom_object_status(GROUP, VERSION, NS, "resourceclaims", first_claim, claim)
    assert placer.place(first, NODES)[0] == "n1"

    # n1's board is taken: the second pod's claim goes to n2, where no driver ever answers
    second, second_claim = _pod_with_claim(core, custom, k8s, "second")
    assert placer.place(second, NODES)[0] is None
    assert _claim(custom, second_claim)["status"]["allocation"]["devices"]["results"][0]["pool"] == "n2"
    why = wait_for(lambda: (r := placer.place(second, NODES)[1]) and "deallocated" in r and r, timeout=60,
                   what="the binding timeout to deallocate the claim")
    assert "not met within" in why
    assert not (_claim(custom, second_claim).get("status") or {}).get("allocation")
    # placed again: n2 comes last now, but n1 is full, so n2 it is, waiting again
    node, why = placer.place(second, NODES)
    assert node is None and "waiting for binding conditions on n2" in why
    assert _claim(custom, second_claim)["status"]["allocation"]["devices"]["results"][0]["pool"] == "n2"
