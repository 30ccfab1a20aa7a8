"""Errors raised by every Fabric Manager backend (simulator and libnvfm binding).

Callers choose what to do by type: ``FabricManagerUnavailable`` is temporary
(retry, report unhealthy), ``NotReady`` means Fabric Manager restarted in
resiliency mode and waits for the activated list, the partition errors are
permanent for the request that caused them. The libnvfm binding keeps the
``fmReturn_t`` code it got in ``code``.
"""

from __future__ import annotations


class FabricManagerError(Exception):
    """Base of every Fabric Manager error; ``code`` is the fmReturn_t when one was returned."""

    def __init__(self, detail: str, *, code: int | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.code = code


class FabricManagerUnavailable(FabricManagerError):
    """Fabric Manager cannot be reached (not running, connection lost, timed out)."""


class NotSupported(FabricManagerError):
    """The call is not supported in Fabric Manager's current mode (FM_ST_NOT_SUPPORTED), e.g.
    ``fmGetNvlinkFailedDevices`` in restart mode, or ``fmSetActivatedFabricPartitions``
    outside a restart (FM User Guide, "Fabric Manager Restart Mode" / "Resiliency")."""


class NotReady(FabricManagerError):
    """Fabric Manager restarted in resiliency mode: partition changes are refused
    until the activated partition list has been set again (``set_activated_list``)."""


class UnknownPartition(FabricManagerError):
    """No partition with this id in Fabric Manager's partition table."""

    def __init__(self, partition_id: int, detail: str | None = None, *, code: int | None = None):
        super().__init__(detail or f"no fabric partition {partition_id}", code=code)
        self.partition_id = partition_id


class PartitionConflict(FabricManagerError):
    """The partition shares a GPU with an active partition (or is itself active)."""

    def __init__(
        self,
        partition_id: int,
        detail: str | None = None,
        *,
        conflicting: tuple[int, ...] = (),
        code: int | None = None,
    ) -> None:
        super().__init__(
            detail or f"partition {partition_id} overlaps active partition(s) {list(conflicting)}",
            code=code,
        )
        self.partition_id = partition_id
        self.conflicting = conflicting


class PartitionAlreadyActive(PartitionConflict):
    """Activating a partition that is active already (Fabric Manager refuses it as in use)."""

    def __init__(self, partition_id: int, *, code: int | None = None) -> None:
        super().__init__(
            partition_id,
            f"partition {partition_id} is already active",
            conflicting=(partition_id,),
            code=code,
        )


class PartitionNotActive(FabricManagerError):
    """Deactivating a partition that is not active."""

    def __init__(self, partition_id: int, *, code: int | None = None) -> None:
        super().__init__(f"partition {partition_id} is not active", code=code)
        self.partition_id = partition_id


class PartitionUnsupported(FabricManagerError):
    """The partition cannot be activated: a GPU in it has failed NVLinks."""

    def __init__(self, partition_id: int, detail: str | None = None, *, code: int | None = None):
        super().__init__(
            detail or f"partition {partition_id} is unsupported (NVLink failure on its GPUs)",
            code=code,
        )
        self.partition_id = partition_id


class InvalidArgument(FabricManagerError):
    """A request Fabric Manager rejects as malformed (e.g. duplicate ids in an activated list)."""
