"""Driving a container run through the Kubernetes API as the scheduler and kubelet would,
with the container's own start and end times, for the usage tests."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from core import crds
from devtools.waiting import wait_for
from tests.api.kube_helpers import bind_pod, get_pod, set_pod_status


def stamp(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def add_gpu_node(k8s: Any, name: str, product: str = "NVIDIA-H100-80GB-HBM3") -> None:
    """A node labelled as NVIDIA GPU Feature Discovery labels it."""
    body = {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product}}}
    try:
        client.CoreV1Api(k8s).create_node(body)
    except ApiException as exc:
        if exc.status != 409:
            raise


def submit(c: httpx.Client, gpus: int) -> str:
    r = c.post("/v1/containers", json={"image": "busybox:1.36", "gpus": gpus, "command": ["sleep", "3"]})
    assert r.status_code == 202, r.text
    return r.json()["id"]


def start_run(k8s: Any, tenancy: str, cid: str, *, node: str, pod_start: datetime, started: datetime) -> None:
    """Scheduled on ``node``; the kubelet took the pod at ``pod_start`` (image pull, VM boot
    follow) and the container started at ``started``."""
    ns, name = crds.tenant_namespace(tenancy), f"gpucaas-{cid}"
    wait_for(lambda: get_pod(k8s, ns, name), 60, what="the API's pod")
    bind_pod(k8s, ns, name, node)
    set_pod_status(
        k8s,
        ns,
        name,
        {
            "phase": "Running",
            "startTime": stamp(pod_start),
            "containerStatuses": [
                {
                    "name": "main",
                    "ready": True,
                    "restartCount": 0,
                    "image": "busybox:1.36",
                    "imageID": "",
                    "state": {"running": {"startedAt": stamp(started)}},
                }
            ],
        },
    )


def end_run(k8s: Any, tenancy: str, cid: str, *, pod_start: datetime, started: datetime, finished: datetime) -> None:
    ns, name = crds.tenant_namespace(tenancy), f"gpucaas-{cid}"
    set_pod_status(
        k8s,
        ns,
        name,
        {
            "phase": "Succeeded",
            "startTime": stamp(pod_start),
            "containerStatuses": [
                {
                    "name": "main",
                    "ready": False,
                    "restartCount": 0,
                    "image": "busybox:1.36",
                    "imageID": "",
                    "state": {
                        "terminated": {
                            "exitCode": 0,
                            "reason": "Completed",
                            "startedAt": stamp(started),
                            "finishedAt": stamp(finished),
                        }
                    },
                }
            ],
        },
    )


def usage_rows(c: httpx.Client, **params: str) -> list[dict[str, Any]]:
    r = c.get("/v1/usage", params={"group_by": "container", **params})
    assert r.status_code == 200, r.text
    return r.json()["data"]


def record_of(c: httpx.Client, cid: str, **params: str) -> dict[str, Any] | None:
    return next((row for row in usage_rows(c, **params) if row["container_id"] == cid), None)
