"""The names every part of the DRA allocation mode agrees on.

The DRA driver publishes one device per GPU under :data:`DRIVER`, each naming the NVLink
pair and quad it belongs to; the chart ships the one DeviceClass (:func:`device_class`), the
tenancy controller one ResourceClaimTemplate per GPU count in each tenant namespace
(:func:`claim_template`), and the API's pods reference those templates
(:func:`claim_template_name`). A claim for a partition size asks for that many GPUs that share
one partition (:data:`MATCH_ATTRIBUTE`: the same pair for 2, the same quad for 4, the node's
eight for 8); a GPU count that is no partition size (3, 5, 6, 7) asks for that many GPUs
without NVLink between them. Why GPUs and not partitions as devices: docs/dra.md, "Slices".
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
BINDING_CONDITION = "gpucaas.dev/partition-active"
BINDING_FAILURE_CONDITION = "gpucaas.dev/partition-failed"
NVLINK_SIZES: tuple[int, ...] = (2, 4, 8)
#: The one DeviceClass: single GPUs of the driver (a device of ``gpus`` 1).
DEVICE_CLASS = DRIVER
#: The device attribute all GPUs of a partition of that size share (``matchAttribute``). Eight
#: GPUs need none: a claim's devices all come from its pod's node, whose eight GPUs are its board.
MATCH_ATTRIBUTE: dict[int, str] = {2: f"{DRIVER}/pair", 4: f"{DRIVER}/quad"}


def device_class() -> dict[str, Any]:
    """The DeviceClass selecting the driver's GPUs (devices of one GPU each)."""
    expression = f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].gpus == 1'
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS},
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


def device_class_quota_key() -> str:
    """The ResourceQuota key counting a namespace's claimed GPUs (devices of the one class).

    Kubernetes counts DRA devices in quota per DeviceClass as
    ``<device-class-name>.deviceclass.resource.k8s.io/devices`` (Kubernetes docs, "Resource
    Quotas", resource quota for extended and DRA resources; KEP-4381)."""
    return f"{DEVICE_CLASS}.deviceclass.resource.k8s.io/devices"


def claim_devices(gpus: int) -> dict[str, Any]:
    """A claim's ``spec.devices`` for ``gpus`` GPUs: that many GPUs of the one class, sharing
    one NVLink partition when ``gpus`` is a partition size (:data:`MATCH_ATTRIBUTE`)."""
    request = {
        "name": POD_CLAIM_NAME,
        "exactly": {"deviceClassName": DEVICE_CLASS, "allocationMode": "ExactCount", "count": gpus},
    }
    devices: dict[str, Any] = {"requests": [request]}
    if gpus in MATCH_ATTRIBUTE:
        devices["constraints"] = [{"requests": [POD_CLAIM_NAME], "matchAttribute": MATCH_ATTRIBUTE[gpus]}]
    return devices


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
        "spec": {"spec": {"devices": claim_devices(gpus)}},
    }
