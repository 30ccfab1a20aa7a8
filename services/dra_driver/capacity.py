"""The node's GPU count as the extended resource ``nvidia.com/gpu`` in its status capacity.

In the DRA allocation mode no device plugin runs, so nothing else owns that name on the node.
Advertising it (Kubernetes docs, "Advertise Extended Resources for a Node": a PATCH of the
Node's ``status.capacity``) lets a tenant pod request ``nvidia.com/gpu: N`` beside its
ResourceClaim, which is how Kueue counts a DRA pod's GPUs (docs/queues.md, "The DRA mode"):
kube-scheduler's NodeResourcesFit and the kubelet's admission then count the same GPUs, while
the DRA allocator still picks the devices.

The kubelet keeps such an entry: its status setter (``nodestatus.MachineInfo``) overwrites
only cadvisor's resources and its device plugins' own, derives ``allocatable`` from
``capacity``, and its device manager allocates nothing for a resource no plugin registered
(``ManagerImpl.isDevicePluginResource``). It zeroes every extended resource, though, when it
registers again with an existing Node while its device-plugin folder is empty
(``Kubelet.reconcileExtendedResource``: no device-manager checkpoint, a node whose kubelet state
was wiped; the folder otherwise holds at least the kubelet's own registration socket), so the
count is checked every round, not written once.
"""

from __future__ import annotations

import logging

from core.kube import Kube, KubeError

log = logging.getLogger(__name__)

GPU_RESOURCE = "nvidia.com/gpu"


class CapacityAdvertiser:
    """Keeps ``status.capacity[nvidia.com/gpu]`` of one Node at the count it is given."""

    def __init__(self, kube: Kube, node_name: str) -> None:
        self.kube = kube
        self.node_name = node_name

    def advertised(self) -> str | None:
        """The node's capacity of ``nvidia.com/gpu`` as the API server has it (None: absent)."""
        node = self.kube.request("GET", f"/api/v1/nodes/{self.node_name}")
        value = ((node.get("status") or {}).get("capacity") or {}).get(GPU_RESOURCE)
        return None if value is None else str(value)

    def advertise(self, gpus: int) -> bool:
        """Make the node's capacity say ``gpus``; True when it was written (it said otherwise)."""
        if self.advertised() == str(gpus):
            return False
        self.kube.request(
            "PATCH",
            f"/api/v1/nodes/{self.node_name}/status",
            body={"status": {"capacity": {GPU_RESOURCE: str(gpus)}}},
            content_type="application/merge-patch+json",
            idempotent=True,
        )
        log.info("node %s advertises %s: %d", self.node_name, GPU_RESOURCE, gpus)
        return True

    def keep(self, gpus: int) -> None:
        """:meth:`advertise`, a failure logged (the next round tries again)."""
        try:
            self.advertise(gpus)
        except KubeError as exc:
            log.warning("could not advertise the GPUs of %s: %s", self.node_name, exc.summary())
