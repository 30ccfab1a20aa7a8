"""What a sandbox node's kubelet handed a pod's container, read from the kubelet's own records.

The demo and the end-to-end tests check the GPUs, CDI names and partition holder a pod got the
way the node recorded them, not the way the control plane meant them: the device manager's
checkpoint (device-plugin mode: the device ids and the plugin's ``ContainerAllocateResponse``)
or the DRA manager's (dra mode: the claims prepared for the pod and the CDI ids
NodePrepareResources answered). Both are JSON files the kubelet rewrites atomically.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.fabric_client import holder_for_gpus
from core.kubelet_dirs import KubeletDirs
from services.device_plugin.api import dp_pb2
from services.dra_driver.driver import holder_for_claim

#: the kubelet's device manager checkpoint, in its device-plugin folder
#: (``pkg/kubelet/cm/devicemanager``: ``kubeletDeviceManagerCheckpoint``)
DEVICE_MANAGER_CHECKPOINT = "kubelet_internal_checkpoint"
#: the kubelet's DRA manager checkpoint, in its root folder (``pkg/kubelet/cm/dra``: ``draManagerStateFileName``)
DRA_MANAGER_CHECKPOINT = "dra_manager_state"


@dataclass(frozen=True)
class HandedOver:
    """What one node handed one pod: GPUs (PCI addresses), CDI device names, and the fabric
    service's holder of the partition (the GPU set, or the claim in dra mode)."""

    node: str
    devices: list[str]
    cdi: list[str]
    holder: str


def _checkpoint(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):  # not written yet, or being replaced
        return None


def _from_dra(node: str, saved: Any, uid: str) -> HandedOver | None:
    claims = [c for c in json.loads(saved["Data"])["ClaimInfoStateList"] or [] if uid in (c.get("PodUIDs") or {})]
    cdi = sorted(
        i
        for c in claims
        for state in (c.get("DriverState") or {}).values()
        for d in state.get("Devices") or []
        for i in d.get("CDIDeviceIDs") or []
    )
    if not cdi:  # the claim is recorded before its preparation's devices: not handed over yet
        return None
    return HandedOver(node, sorted(i.split("=", 1)[1] for i in cdi), cdi, holder_for_claim(claims[0]["ClaimUID"]))


def _from_device_manager(node: str, saved: Any, uid: str, resource: str) -> HandedOver | None:
    for e in saved["Data"]["PodDeviceEntries"] or []:
        if e["PodUID"] == uid and e["ResourceName"] == resource:
            devices = sorted(d for ids in e["DeviceIDs"].values() for d in ids)
            resp = dp_pb2.ContainerAllocateResponse.FromString(base64.b64decode(e["AllocResp"]))
            return HandedOver(node, devices, [d.name for d in resp.cdi_devices], holder_for_gpus(devices))
    return None


def handed_over(
    kubelet_dirs: dict[str, Path], uid: str, *, dra: bool, resource: str = "nvidia.com/gpu"
) -> HandedOver | None:
    """What the pod with ``uid`` was handed on whichever node (name -> kubelet root folder) holds
    it; None while no node has handed it anything."""
    for node, kubelet_dir in kubelet_dirs.items():
        if dra:
            saved = _checkpoint(kubelet_dir / DRA_MANAGER_CHECKPOINT)
            got = _from_dra(node, saved, uid) if saved is not None else None
        else:
            saved = _checkpoint(KubeletDirs(kubelet_dir).device_plugins / DEVICE_MANAGER_CHECKPOINT)
            got = _from_device_manager(node, saved, uid, resource) if saved is not None else None
        if got is not None:
            return got
    return None
