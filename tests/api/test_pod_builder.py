"""The pure builders: the tenant pod and the Tenancy resource, tested by equality."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from services.api.domain.pods import build_pod, build_tenancy, container_status_from_pod, pod_name


def test_pod_name_is_derived_from_the_container_id() -> None:
    assert pod_name("0a1b2c") == "gpucaas-0a1b2c"
    # Distinct containers never share a pod, and every name is a DNS-1123 label, as the
    # API server requires of a pod's name (Kubernetes docs, "Object Names and IDs").
    ids = ["0a1b2c", "0a1b2d", "d7a3556918ebc3aba0e7"]
    names = [pod_name(i) for i in ids]
    assert len(set(names)) == len(ids)
    assert all(re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", n) and len(n) <= 63 for n in names)


def test_minimal_pod() -> None:
    assert build_pod(container_id="abc123", tenancy="landon", image="nvcr.io/nvidia/cuda:12.5.0", gpus=1) == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "gpucaas-abc123",
            "namespace": "tenant-landon",
            "labels": {
                "gpucaas.dev/container-id": "abc123",
                "gpucaas.dev/tenancy": "landon",
                "app.kubernetes.io/managed-by": "gpucaas-api",
            },
            "finalizers": ["gpucaas.dev/usage"],
        },
        "spec": {
            "runtimeClassName": "kata-qemu-nvidia-gpu",
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "hostNetwork": False,
            "hostPID": False,
            "hostIPC": False,
            "securityContext": {
                "seccompProfile": {"type": "RuntimeDefault"},
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "runAsGroup": 1000,
            },
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/cuda:12.5.0",
                    "imagePullPolicy": "Always",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    "securityContext": {
                        "privileged": False,
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def test_full_pod_with_nfs_timeout_and_custom_resource() -> None:
    pod = build_pod(
        container_id="c1",
        tenancy="acme",
        image="registry.example.com:5000/team/train@sha256:" + "a" * 64,
        gpus=8,
        command=["python"],
        args=["train.py", "--epochs", "3"],
        env={"EPOCHS": "3", "WANDB_MODE": "offline"},
        timeout_seconds=3600,
        nfs={"server": "10.0.0.5", "path": "/export/acme", "readOnly": True, "capacity": "1Ti"},
        gpu_resource="nvidia.com/h100",
        runtime_class="kata-custom",
    )
    spec = pod["spec"]
    main = spec["containers"][0]
    assert spec["runtimeClassName"] == "kata-custom"
    assert spec["activeDeadlineSeconds"] == 3600
    assert main["resources"] == {"limits": {"nvidia.com/h100": "8"}}
    assert main["command"] == ["python"]
    assert main["args"] == ["train.py", "--epochs", "3"]
    assert main["env"] == [{"name": "EPOCHS", "value": "3"}, {"name": "WANDB_MODE", "value": "offline"}]
    assert spec["volumes"] == [
        {"name": "tenant-storage", "persistentVolumeClaim": {"claimName": "tenant-storage", "readOnly": True}}
    ]
    assert main["volumeMounts"] == [{"name": "tenant-storage", "mountPath": "/data", "readOnly": True}]
    assert "hostPath" not in str(pod)


def test_tenancy_resource() -> None:
    assert build_tenancy(name="landon", gpu_quota=16, pod_quota=10) == {
        "apiVersion": "gpucaas.dev/v1alpha1",
        "kind": "Tenancy",
        "metadata": {"name": "landon", "labels": {"app.kubernetes.io/managed-by": "gpucaas-api"}},
        "spec": {
            "gpuQuota": 16,
            "podQuota": 10,
            "guaranteedGpus": 0,
            "weight": 1.0,
            "network": {"allowInternet": False},
        },
    }
    with_nfs = build_tenancy(
        name="acme",
        gpu_quota=8,
        pod_quota=5,
        guaranteed_gpus=4,
        weight=2.5,
        allow_internet=True,
        nfs={"server": "nfs.local", "path": "/x"},
    )
    assert with_nfs["spec"] == {
        "gpuQuota": 8,
        "podQuota": 5,
        "guaranteedGpus": 4,
        "weight": 2.5,
        "network": {"allowInternet": True},
        "nfs": {"server": "nfs.local", "path": "/x", "readOnly": False, "capacity": "1Ti"},
    }


def test_a_queued_pod_names_its_tenancys_local_queue_and_nothing_else_changes() -> None:
    """With queueing by Kueue the pod carries the queue label; Kueue's webhook does the rest."""
    plain = build_pod(container_id="c-1", tenancy="acme", image="ubuntu", gpus=8)
    queued = build_pod(container_id="c-1", tenancy="acme", image="ubuntu", gpus=8, queue="default")
    assert queued["metadata"]["labels"] == {
        **plain["metadata"]["labels"],
        "kueue.x-k8s.io/queue-name": "default",
        "kueue.x-k8s.io/priority-class": "gpucaas-standard",
    }
    assert {**queued, "metadata": plain["metadata"]} == plain
    assert "kueue.x-k8s.io/queue-name" not in plain["metadata"]["labels"]


def test_an_interruptible_pod_names_the_lower_workload_priority_class_only_when_queued() -> None:
    """The class is Kueue's to act on: without a queue an interruptible pod is the same pod."""
    plain = build_pod(container_id="c-1", tenancy="acme", image="ubuntu", gpus=2)
    assert build_pod(container_id="c-1", tenancy="acme", image="ubuntu", gpus=2, interruptible=True) == plain
    queued = build_pod(container_id="c-1", tenancy="acme", image="ubuntu", gpus=2, queue="default", interruptible=True)
    assert queued["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "gpucaas-interruptible"


T0 = "2026-01-02T03:04:05Z"
T1 = "2026-01-02T04:00:00Z"
SPEC = {
    "nodeName": "gpu-node-1",
    "containers": [{"name": "main", "image": "nvcr.io/acme/x:1", "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
}


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        pytest.param({"spec": {"containers": []}}, ("Pending", None, None, None), id="fresh"),
        pytest.param(
            {
                "spec": SPEC,
                "status": {
                    "phase": "Pending",
                    "containerStatuses": [
                        {"state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}}
                    ],
                },
            },
            ("Pending", "gpu-node-1", 2, "ImagePullBackOff: nvcr.io/acme/x:1 not found (image pull failed)"),
            id="image-pull",
        ),
        pytest.param(
            {"spec": SPEC, "status": {"phase": "Running", "startTime": T0}},
            ("Running", "gpu-node-1", 2, None),
            id="running",
        ),
        pytest.param(
            {"spec": SPEC, "status": {"phase": "Failed", "reason": "DeadlineExceeded", "message": "too long"}},
            ("Failed", "gpu-node-1", 2, "timeout_seconds exceeded: the container was stopped"),
            id="deadline",
        ),
        pytest.param(
            {
                "spec": SPEC,
                "status": {
                    "phase": "Succeeded",
                    "containerStatuses": [
                        {"state": {"terminated": {"reason": "Completed", "exitCode": 0, "finishedAt": T1}}}
                    ],
                },
            },
            ("Succeeded", "gpu-node-1", 2, "Completed: finished with exit code 0"),
            id="succeeded",
        ),
        pytest.param({"spec": SPEC, "status": {"phase": "Unknown"}}, ("Pending", "gpu-node-1", 2, None), id="unknown"),
    ],
)
def test_status_from_pod(pod: dict, expected: tuple) -> None:
    report = container_status_from_pod(pod)
    assert (report.status, report.node_name, report.gpus, report.message) == expected


def test_times_from_pod() -> None:
    pod = {
        "spec": SPEC,
        "status": {
            "phase": "Succeeded",
            "startTime": T0,
            "containerStatuses": [{"state": {"terminated": {"exitCode": 0, "finishedAt": T1}}}],
        },
    }
    report = container_status_from_pod(pod)
    assert report.started_at == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert report.finished_at == datetime(2026, 1, 2, 4, 0, 0, tzinfo=UTC)


def test_the_start_is_the_containers_own_and_a_container_that_never_ran_has_none() -> None:
    started = "2026-01-02T03:10:00Z"
    ran = {
        "spec": SPEC,
        "status": {
            "phase": "Failed",
            "startTime": T0,
            "containerStatuses": [{"state": {"terminated": {"exitCode": 3, "startedAt": started, "finishedAt": T1}}}],
        },
    }
    assert container_status_from_pod(ran).started_at == datetime(2026, 1, 2, 3, 10, 0, tzinfo=UTC)
    running = {
        "spec": SPEC,
        "status": {
            "phase": "Running",
            "startTime": T0,
            "containerStatuses": [{"state": {"running": {"startedAt": started}}}],
        },
    }
    assert container_status_from_pod(running).started_at == datetime(2026, 1, 2, 3, 10, 0, tzinfo=UTC)
    # the kubelet took the pod (startTime) but the image never pulled before the deadline
    never = {
        "spec": SPEC,
        "status": {
            "phase": "Failed",
            "reason": "DeadlineExceeded",
            "startTime": T0,
            "containerStatuses": [{"state": {"waiting": {"reason": "ImagePullBackOff"}}}],
        },
    }
    assert container_status_from_pod(never).started_at is None
    pulling = {
        "spec": SPEC,
        "status": {
            "phase": "Pending",
            "startTime": T0,
            "containerStatuses": [{"state": {"waiting": {"reason": "ContainerCreating"}}}],
        },
    }
    assert container_status_from_pod(pulling).started_at is None


# --- DRA allocation mode (docs/dra.md) --------------------------------------------------


@pytest.mark.parametrize("queue", [None, "default"])
@pytest.mark.parametrize("gpus", [1, 2, 3, 4, 5, 6, 7, 8])
def test_dra_pod_asks_for_its_claim_template_and_is_valid_kubernetes(gpus: int, queue: str | None) -> None:
    """In DRA mode the pod names the tenant namespace's template for its GPU count and the
    container uses that claim; no extended resource, unless Kueue queues it: then it also
    requests ``nvidia.com/gpu: N``, what Kueue counts (the DRA driver advertises each node's GPUs
    so), and still gets its GPUs from the claim. kubernetes-validate (strict, the Kubernetes 1.36
    schema: resource.k8s.io/v1 is GA since 1.34) accepts the pod and the template it references."""
    import kubernetes_validate

    from core import dra
    from services.api.domain import sizing

    share = sizing.Share(cpu_milli=24000, memory_bytes=224 * sizing.GIB, shm_bytes=32 * sizing.GIB, hugepages=True)
    pod = build_pod(
        container_id="c1",
        tenancy="acme",
        image="nvcr.io/nvidia/cuda:12.5.0",
        gpus=gpus,
        size=sizing.size_for(share, gpus),
        allocation_mode="dra",
        queue=queue,
    )
    spec = pod["spec"]
    main = spec["containers"][0]
    assert spec["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": f"gpucaas-gpus-{gpus}"}]
    assert main["resources"]["claims"] == [{"name": "gpus"}]
    assert main["resources"]["limits"].get("nvidia.com/gpu") == (str(gpus) if queue else None)
    assert "nvidia.com/gpu" not in main["resources"]["requests"]  # an extended resource's request is its limit
    # CPU, memory and hugepages are sized from the GPU count as in device-plugin mode
    assert main["resources"]["limits"]["cpu"] == str(24 * gpus)
    assert main["resources"]["limits"]["hugepages-1Gi"] == f"{224 * gpus}Gi"
    kubernetes_validate.validate(pod, "1.36.0", strict=True)
    template = dra.claim_template(gpus, pod["metadata"]["namespace"])
    assert template["metadata"]["name"] == spec["resourceClaims"][0]["resourceClaimTemplateName"]
    kubernetes_validate.validate(template, "1.36.0", strict=True)
    # the report reads the GPU count back from the pod, as it does from the extended resource
    assert container_status_from_pod(pod).gpus == gpus


def test_dra_pod_without_sizing_has_only_the_claim() -> None:
    pod = build_pod(container_id="c1", tenancy="acme", image="busybox", gpus=4, allocation_mode="dra")
    assert pod["spec"]["containers"][0]["resources"] == {"claims": [{"name": "gpus"}]}
    assert container_status_from_pod(pod, "nvidia.com/gpu").gpus == 4


def test_queued_dra_pod_without_sizing_has_the_claim_and_the_count() -> None:
    pod = build_pod(container_id="c1", tenancy="acme", image="busybox", gpus=4, allocation_mode="dra", queue="q")
    assert pod["spec"]["containers"][0]["resources"] == {
        "limits": {"nvidia.com/gpu": "4"},
        "claims": [{"name": "gpus"}],
    }
    assert container_status_from_pod(pod, "nvidia.com/gpu").gpus == 4  # counted once


def test_report_ignores_claims_the_container_does_not_use_and_foreign_templates() -> None:
    spec = {
        "resourceClaims": [
            {"name": "gpus", "resourceClaimTemplateName": "gpucaas-gpus-2"},
            {"name": "other", "resourceClaimTemplateName": "someone-elses"},
        ],
        "containers": [{"name": "main", "resources": {"claims": [{"name": "other"}]}}],
    }
    assert container_status_from_pod({"spec": spec}).gpus is None


def test_volumes_are_mounted_by_claim_with_the_tenant_group_owning_them() -> None:
    pod = build_pod(
        container_id="c1",
        tenancy="acme",
        image="busybox",
        gpus=1,
        volumes=[
            {"name": "datasets", "mount_path": "/datasets", "read_only": True},
            {"name": "out", "mount_path": "/out", "read_only": False},
        ],
    )
    spec = pod["spec"]
    assert spec["volumes"] == [
        {"name": "volume-0", "persistentVolumeClaim": {"claimName": "gpucaas-volume-datasets", "readOnly": True}},
        {"name": "volume-1", "persistentVolumeClaim": {"claimName": "gpucaas-volume-out", "readOnly": False}},
    ]
    assert spec["containers"][0]["volumeMounts"] == [
        {"name": "volume-0", "mountPath": "/datasets", "readOnly": True},
        {"name": "volume-1", "mountPath": "/out", "readOnly": False},
    ]
    assert spec["securityContext"]["fsGroup"] == 1000
    assert "fsGroup" not in build_pod(container_id="c1", tenancy="acme", image="b", gpus=1)["spec"]["securityContext"]


def test_tenancy_resource_carries_the_volume_allowance() -> None:
    from services.api.domain.volumes import Quota

    spec = build_tenancy(name="acme", gpu_quota=8, pod_quota=2, volumes=Quota("gpucaas-volumes", 100 << 30, 10))["spec"]
    assert spec["volumes"] == {"storageClassName": "gpucaas-volumes", "storageQuota": "100Gi", "maxVolumes": 10}
