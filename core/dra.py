"""The names every part of the DRA allocation mode agrees on.

The DRA driver publishes devices under :data:`DRIVER`; the chart ships one DeviceClass
per partition size (:func:`device_class`), the tenancy controller one
ResourceClaimTemplate per size in each tenant namespace (:func:`claim_template`), and the
API's pods reference those templates (:func:`claim_template_name`). A request for a GPU
count that is no partition size (3, 5, 6, 7) asks for that many single-GPU devices of the
plain class: GPUs without NVLink between them.
"""

from __future__ import annotations

import re
from typing import Any, Literal

#: How GPUs are allocated: the device plugin's extended resource (every Kubernetes) or DRA
#: claims (Kubernetes 1.34+). The API's ``allocation_mode``, the tenancy controller's and the
#: chart's ``allocation.mode`` must agree.
AllocationMode = Literal["device-plugin", "dra"]
DEVICE_PLUGIN_MODE: AllocationMode = "device-plugin"
DRA_MODE: AllocationMode = "dra"
#: GPU counts a pod may ask for (services/api/domain/validation.py: 1 to 8): one template each.
CLAIM_TEMPLATE_SIZES: tuple[int, ...] = tuple(range(1, 9))
#: The name of the pod's claim (``spec.resourceClaims[].name``) and of the template's request.
POD_CLAIM_NAME = "gpus"

DRIVER = "gpu.gpucaas.dev"
COUNTER_SET = "gpus"
BINDING_CONDITION = "gpucaas.dev/partition-active"
BINDING_FAILURE_CONDITION = "gpucaas.dev/partition-failed"
NVLINK_SIZES: tuple[int, ...] = (2, 4, 8)
PLAIN_CLASS = DRIVER  # single GPUs, no NVLink


def device_class_name(size: int) -> str:
    """``gpu.gpucaas.dev`` for single GPUs, ``nvlink-N.gpu.gpucaas.dev`` for N-GPU partitions."""
    return PLAIN_CLASS if size == 1 else f"nvlink-{size}.{DRIVER}"


def device_class(size: int) -> dict[str, Any]:
    """The DeviceClass selecting whole partitions of ``size`` GPUs (1 = single GPUs)."""
    if size != 1 and size not in NVLINK_SIZES:
        raise ValueError(f"no NVLink partition of {size} GPUs (sizes 1, 2, 4, 8)")
    expression = f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].gpus == {size}'
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": device_class_name(size)},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def claim_template_name(gpus: int) -> str:
    return f"gpucaas-gpus-{gpus}"


_TEMPLATE_NAME = re.compile(r"^gpucaas-gpus-([1-9][0-9]*)$")


def gpus_of_claim_template(name: str | None) -> int | None:
    """The GPU count of a template named by :func:`claim_template_name`, else None."""
    if not isinstance(name, str):
        return None
    m = _TEMPLATE_NAME.match(name)
    return int(m.group(1)) if m else None


def device_class_quota_key(size: int) -> str:
    """The ResourceQuota key counting the devices of the class of ``size``-GPU partitions.

    Kubernetes counts DRA devices in quota per DeviceClass as
    ``<device-class-name>.deviceclass.resource.k8s.io/devices`` (Kubernetes docs, "Resource
    Quotas", resource quota for extended and DRA resources; KEP-4381)."""
    return f"{device_class_name(size)}.deviceclass.resource.k8s.io/devices"


def claim_request(gpus: int) -> dict[str, Any]:
    """The device request for ``gpus`` GPUs: one partition, or ``gpus`` single GPUs."""
    if gpus in NVLINK_SIZES:
        exactly = {"deviceClassName": device_class_name(gpus), "allocationMode": "ExactCount", "count": 1}
    else:
        exactly = {"deviceClassName": PLAIN_CLASS, "allocationMode": "ExactCount", "count": gpus}
    return {"name": POD_CLAIM_NAME, "exactly": exactly}


def claim_template(gpus: int, namespace: str) -> dict[str, Any]:
    """The ResourceClaimTemplate a tenant pod asking for ``gpus`` GPUs references."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": claim_template_name(gpus),
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "gpucaas"},
        },
        "spec": {"spec": {"devices": {"requests": [claim_request(gpus)]}}},
    }
