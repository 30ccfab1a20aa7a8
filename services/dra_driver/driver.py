"""Prepare and unprepare claims: allocated partition devices -> CDI ids + an active partition.

What the kubelet's DRA calls mean here (KEP-4381 "Structured parameters", kubelet side):
NodePrepareResources comes before the pod's containers are created, once per claim and
node, possibly again after a kubelet restart; NodeUnprepareResources after the last pod
using the claim has stopped. Both must be idempotent.

Prepare reads the ResourceClaim (its ``status.allocation`` names the devices the
scheduler chose), checks the UID (a claim deleted and re-created under the same name is
another claim), maps each of this driver's devices in this node's pool to its Fabric
Manager partition and the PCI addresses of its GPUs, asks the fabric service to activate
the partition for the holder ``claim:<uid>``, records all of it in the checkpoint and
answers the CDI ids. Unprepare releases the holder and forgets the claim.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from core.dra import DRIVER
from core.fabric_client import FabricConflict, FabricRejected
from core.topology import partition_by_id
from services.dra_driver.checkpoint import Checkpoint, PreparedClaim, PreparedDevice
from services.dra_driver.errors import ClaimNotReady
from services.dra_driver.slices import partition_of_device

log = logging.getLogger(__name__)


class Fabric(Protocol):
    def activate(self, holder: str, gpus: list[str]) -> Any: ...

    def release(self, holder: str) -> Any: ...


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    uid: str
    name: str


#: The fabric holders of this driver's activations; any other holder is foreign to the DRA mode.
CLAIM_HOLDER_PREFIX = "claim:"


def holder_for_claim(uid: str) -> str:
    return f"{CLAIM_HOLDER_PREFIX}{uid}"


class Driver:
    """The node side of the DRA mode for one node's pool."""

    def __init__(
        self,
        *,
        node_name: str,
        checkpoint: Checkpoint,
        fabric: Fabric,
        read_claim: Callable[[str, str], Mapping[str, Any]],
        physical_to_pci: Callable[[], Mapping[int, str]],
        cdi_id: Callable[[str], str],
    ) -> None:
        self.node_name = node_name
        self.checkpoint = checkpoint
        self.fabric = fabric
        self.read_claim = read_claim
        self.physical_to_pci = physical_to_pci
        self.cdi_id = cdi_id
        #: called with the PCI addresses of each claim prepared (the GPU-lease agent hears it)
        self.prepared_listeners: list[Callable[[tuple[str, ...]], None]] = []
        #: called with each claim whose partition this driver just activated (the pod's Event)
        self.activated_listeners: list[Callable[[PreparedClaim], None]] = []
        #: called when the fabric service refused to activate a claim's partition (the
        #: driver republishes its slices at once: a holder other than a claim may hold it)
        self.refused_listeners: list[Callable[[], None]] = []
        #: why these GPUs may not be handed to (namespace, pod) now, or None (GPU leases)
        self.gpu_refusal: Callable[[tuple[str, ...], str, str], str | None] | None = None

    def prepare(self, ref: ClaimRef) -> PreparedClaim:
        done = self.checkpoint.get(ref.uid)
        if done is not None:
            return done  # idempotent: the kubelet may ask again after its own restart
        claim = self.read_claim(ref.namespace, ref.name)
        uid = claim.get("metadata", {}).get("uid")
        if uid != ref.uid:
            raise ClaimNotReady(
                f"ResourceClaim {ref.namespace}/{ref.name} has UID {uid}, not {ref.uid}: it was deleted and re-created"
            )
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
        mine = [r for r in results if r.get("driver") == DRIVER and r.get("pool") == self.node_name]
        pci = self.physical_to_pci()
        devices: list[PreparedDevice] = []
        addresses: list[str] = []
        for result in mine:
            partition = partition_by_id(partition_of_device(result["device"]))
            try:
                bdfs = [pci[g] for g in partition.sorted_gpus()]
            except KeyError as exc:
                raise ClaimNotReady(
                    f"GPU with physical id {exc.args[0]} of device {result['device']} is not on this node"
                ) from None
            addresses.extend(bdfs)
            devices.append(
                PreparedDevice(
                    (result["request"],), self.node_name, result["device"], tuple(self.cdi_id(b) for b in bdfs)
                )
            )
        pod = next(
            (
                r.get("name", "")
                for r in (claim.get("status") or {}).get("reservedFor") or []
                if r.get("resource") == "pods"
            ),
            "",
        )
        if addresses and self.gpu_refusal is not None:
            # The slices may lag behind a GPU's lease (published every few seconds): a GPU
            # still leased to another pod or on its way through the firmware check is not
            # handed out; the kubelet retries Prepare.
            why = self.gpu_refusal(tuple(addresses), ref.namespace, pod)
            if why:
                raise ClaimNotReady(why)
        prepared = PreparedClaim(
            ref.uid, ref.namespace, ref.name, holder_for_claim(ref.uid), tuple(addresses), tuple(devices), pod
        )
        if addresses:
            try:
                self.fabric.activate(prepared.holder, list(addresses))
            except (FabricConflict, FabricRejected):
                for refused in self.refused_listeners:
                    refused()
                raise
        self.checkpoint.put(prepared)
        for listener in self.prepared_listeners:
            listener(prepared.pci_addresses)
        if addresses:
            for announce in self.activated_listeners:
                announce(prepared)
        log.info(
            "prepared claim %s/%s (%s): %s",
            ref.namespace,
            ref.name,
            ref.uid,
            ", ".join(d.device_name for d in devices) or "no devices of this driver",
        )
        return prepared

    def unprepare(self, ref: ClaimRef) -> None:
        done = self.checkpoint.get(ref.uid)
        if done is None:
            return  # never prepared here, or already unprepared
        if done.pci_addresses:
            self.fabric.release(done.holder)
        self.checkpoint.remove(ref.uid)
        log.info("unprepared claim %s/%s (%s)", ref.namespace, ref.name, ref.uid)
