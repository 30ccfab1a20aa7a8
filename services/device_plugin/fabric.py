"""Adapter: the node's fabric service through ``core.fabric_client.FabricClient``.

Re-raises the client's errors as this service's (``FabricUnavailable``,
``ActivationConflict``, ``ActivationRejected``) from the original. ``NoFabric``
stands in when no socket is configured: every call is "unavailable".
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from core import fabric_client as fc
from services.device_plugin.allocation import normalise_bdf
from services.device_plugin.errors import ActivationConflict, ActivationRejected, FabricUnavailable
from services.device_plugin.ports import Activation, FabricTopology, LiveHolder


def _translate(exc: fc.FabricError) -> Exception:
    if isinstance(exc, fc.FabricConflict):
        return ActivationConflict(exc.detail)
    if isinstance(exc, fc.FabricUnavailable):
        return FabricUnavailable(str(exc))
    return ActivationRejected(str(exc))


class FabricService:
    """``FabricPort`` over the fabric service's unix socket."""

    def __init__(self, socket_path: Path, timeout: float = 5.0) -> None:
        self.socket_path = Path(socket_path)
        self._client = fc.FabricClient(str(socket_path), timeout=timeout)

    def _available(self) -> None:
        if not self.socket_path.exists():
            raise FabricUnavailable(f"fabric service socket {self.socket_path} does not exist")

    def topology(self) -> FabricTopology:
        self._available()
        try:
            topo = self._client.topology()
        except fc.FabricError as exc:
            raise _translate(exc) from exc
        failed: dict[str, str] = {}
        for g in topo["gpus"]:
            pci = g["pci_bus_id"]
            if not g["healthy"] and pci is not None:
                failed[normalise_bdf(pci)] = g["reason"] or "reported unhealthy by the fabric service"
        return FabricTopology(gpus=tuple(topo["gpus"]), source=topo["source"], failed=failed)

    def activate(self, holder: str, gpus: Iterable[str]) -> Activation:
        self._available()
        try:
            body = self._client.activate(holder, list(gpus))
        except fc.FabricError as exc:
            raise _translate(exc) from exc
        return Activation(
            holder=body["holder"],
            gpus=tuple(body["gpus"]),
            partition_ids=tuple(body["partition_ids"]),
            nvlink=body["nvlink"],
        )

    def release(self, holder: str) -> None:
        self._available()
        try:
            self._client.release(holder)
        except fc.FabricError as exc:
            raise _translate(exc) from exc

    def sync(self, live: Iterable[LiveHolder], grace_seconds: float) -> None:
        self._available()
        try:
            self._client.sync([{"holder": h.holder, "pod": h.pod} for h in live], grace_seconds)
        except fc.FabricError as exc:
            raise _translate(exc) from exc

    def close(self) -> None:
        self._client.close()


class NoFabric:
    """No fabric service configured: PCI-order ids, nothing to activate."""

    def topology(self) -> FabricTopology:
        raise FabricUnavailable("no fabric service socket configured")

    def activate(self, holder: str, gpus: Iterable[str]) -> Activation:
        raise FabricUnavailable("no fabric service socket configured")

    def release(self, holder: str) -> None:
        raise FabricUnavailable("no fabric service socket configured")

    def sync(self, live: Iterable[LiveHolder], grace_seconds: float) -> None:
        raise FabricUnavailable("no fabric service socket configured")

    def close(self) -> None:
        return None


def holder_for(bdfs: Iterable[str]) -> str:
    return fc.holder_for_gpus(bdfs)
