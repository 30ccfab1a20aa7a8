"""Allocation mode dra: the controller keeps the claim templates and the per-DeviceClass quota.

Against the local cluster's kube-apiserver, which serves resource.k8s.io/v1 and refuses
ResourceClaimTemplates over the v1 types' limits, so every template the controller writes
is one it accepts.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from core import dra
from services.tenancy_controller import builders, kube, policies, reconcile

from .conftest import ControllerThread, controller_settings, wait_for
from .factories import new_tenancy
from .helpers import merge_patch, wait_phase

TEMPLATES = [f"gpucaas-gpus-{n}" for n in range(1, 9)]


@pytest.fixture
def dra_controller(api: kube.KubeClient, kubeconfig: Path) -> Iterator[ControllerThread]:
    ctl = ControllerThread(controller_settings(kubeconfig, allocation_mode="dra")).start()
    try:
        yield ctl
    finally:
        ctl.stop()


def _templates(api: kube.KubeClient, namespace: str) -> dict[str, dict]:
    return {n: t for n in TEMPLATES if (t := api.get("ResourceClaimTemplate", n, namespace))}


def test_templates_and_device_class_quota_reach_the_tenant_namespace(api, dra_controller):
    api.create(new_tenancy("dra-acme", gpu_quota=8, pod_quota=10))
    tenancy = wait_phase(api, "dra-acme", "Ready")
    live = _templates(api, "tenant-dra-acme")
    assert sorted(live) == sorted(TEMPLATES)
    for gpus in range(1, 9):
        template = live[f"gpucaas-gpus-{gpus}"]
        assert template["spec"]["spec"]["devices"] == dra.claim_devices(gpus)
        owner = template["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["uid"]) == ("Tenancy", tenancy["metadata"]["uid"])
    # a partition request asks for its GPUs in one quad (pair); 3, 5, 6, 7 GPUs are just GPUs
    four = live["gpucaas-gpus-4"]["spec"]["spec"]["devices"]
    assert four["requests"][0]["exactly"] == {
        "deviceClassName": "gpu.gpucaas.dev",
        "allocationMode": "ExactCount",
        "count": 4,
    }
    assert four["constraints"] == [{"requests": ["gpus"], "matchAttribute": "gpu.gpucaas.dev/quad"}]
    three = live["gpucaas-gpus-3"]["spec"]["spec"]["devices"]
    assert three["requests"][0]["exactly"]["count"] == 3 and "constraints" not in three
    hard = api.get("ResourceQuota", "tenant-quota", "tenant-dra-acme")["spec"]["hard"]
    assert {k: v for k, v in hard.items() if "deviceclass" in k} == {
        "gpu.gpucaas.dev.deviceclass.resource.k8s.io/devices": "8"
    }


def test_a_deleted_template_is_restored_and_the_quota_follows_the_spec(api, dra_controller):
    api.create(new_tenancy("dra-beta", gpu_quota=4))
    wait_phase(api, "dra-beta", "Ready")
    before = api.get("ResourceClaimTemplate", "gpucaas-gpus-2", "tenant-dra-beta")
    api.delete("ResourceClaimTemplate", "gpucaas-gpus-2", "tenant-dra-beta")
    wait_for(
        lambda: (
            (o := api.get("ResourceClaimTemplate", "gpucaas-gpus-2", "tenant-dra-beta"))
            and o["metadata"]["uid"] != before["metadata"]["uid"]
        ),
        what="template restored",
    )
    merge_patch(api, "dra-beta", {"spec": {"gpuQuota": 16}})
    key = dra.device_class_quota_key()
    wait_for(
        lambda: api.get("ResourceQuota", "tenant-quota", "tenant-dra-beta")["spec"]["hard"].get(key) == "16",
        what="the quota of claimed GPUs follows gpuQuota 16",
    )


def test_templates_go_with_a_namespace_the_tenancy_does_not_own(api, dra_controller):
    """A namespace that existed before the Tenancy stays; what the controller put in it goes."""
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tenant-dra-gamma"}})
    api.create(new_tenancy("dra-gamma"))
    wait_phase(api, "dra-gamma", "Ready")
    assert sorted(_templates(api, "tenant-dra-gamma")) == sorted(TEMPLATES)
    api.delete("Tenancy", "dra-gamma")
    wait_for(lambda: api.get("Tenancy", "dra-gamma") is None, what="tenancy gone")
    assert _templates(api, "tenant-dra-gamma") == {}
    assert api.get("Namespace", "tenant-dra-gamma") is not None


def test_device_plugin_mode_writes_no_templates(api, controller):
    api.create(new_tenancy("plain", gpu_quota=2))
    wait_phase(api, "plain", "Ready")
    assert _templates(api, "tenant-plain") == {}
    hard = api.get("ResourceQuota", "tenant-quota", "tenant-plain")["spec"]["hard"]
    assert hard["requests.nvidia.com/gpu"] == "2" and not [k for k in hard if "deviceclass" in k]


def test_plan_lists_the_templates_after_the_quota() -> None:
    body = new_tenancy("plan", gpu_quota=8)
    body["metadata"]["uid"] = "u-1"
    plan = reconcile.reconcile_tenancy(body, network=policies.NetworkConfig(), allocation_mode="dra")
    kinds = [o["kind"] for o in plan.components[reconcile.QUOTA]]
    assert kinds == ["ResourceQuota", "LimitRange", *["ResourceClaimTemplate"] * 8]
    assert builders.claim_template_name_list() == TEMPLATES
