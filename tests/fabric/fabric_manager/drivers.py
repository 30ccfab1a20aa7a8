"""One way to drive either backend in a test: its client plus Fabric Manager events.

The same rule table runs against the simulator and against the binding over
the compiled fake libnvfm; a driver hides how each one plays a restart or an
NVLink failure.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from services.fabric.fabric_manager.interface import FabricManager
from services.fabric.fabric_manager.simulator import SimulatedFabric


@dataclass
class SimDriver:
    client: FabricManager
    fabric: SimulatedFabric

    def stop(self) -> None:
        self.fabric.stop()

    def start(self, resiliency: bool = True) -> None:
        self.fabric.resiliency = resiliency
        self.fabric.start()

    def fail_gpu(self, physical_id: int, port: int = 0) -> None:
        self.fabric.inject_gpu_nvlink_failure(physical_id, ports=(port,))

    def heal_gpu(self, physical_id: int) -> None:
        self.fabric.clear_gpu_nvlink_failure(physical_id)

    def fail_switch(self, pci_bus_id: str, port: int) -> None:
        self.fabric.inject_switch_nvlink_failure(pci_bus_id, ports=(port,))

    def active(self) -> set[int]:
        """What Fabric Manager holds active, read from its state (listing may be refused)."""
        return set(self.fabric.active_partition_ids())

    def set_h100(self, on: bool = True) -> None:
        self.fabric.h100 = on

    def set_restart_timeout(self, seconds: float) -> None:
        self.fabric.restart_timeout_s = seconds

    def running(self) -> bool:
        return self.fabric.running


@dataclass
class LibDriver:
    client: FabricManager
    lib: ctypes.CDLL

    def stop(self) -> None:
        self.lib.fakeFmStop()

    def start(self, resiliency: bool = True) -> None:
        self.lib.fakeFmStart(1 if resiliency else 0)

    def fail_gpu(self, physical_id: int, port: int = 0) -> None:
        assert self.lib.fakeFmInjectGpuFailure(physical_id, port) == 0

    def heal_gpu(self, physical_id: int) -> None:
        assert self.lib.fakeFmClearGpuFailure(physical_id) == 0

    def fail_switch(self, pci_bus_id: str, port: int) -> None:
        # Fabric Manager writes NVML's 8-digit-domain form.
        assert self.lib.fakeFmInjectSwitchFailure(f"0000{pci_bus_id}".upper().encode(), port) == 0

    def active(self) -> set[int]:
        return {i for i in range(15) if self.lib.fakeFmIsActive(i) == 1}

    def set_h100(self, on: bool = True) -> None:
        self.lib.fakeFmSetH100(1 if on else 0)

    def set_restart_timeout(self, seconds: float) -> None:
        self.lib.fakeFmSetRestartTimeoutMs(int(seconds * 1000))

    def running(self) -> bool:
        return bool(self.lib.fakeFmRunning())


Driver = SimDriver | LibDriver


def apply(driver: Driver, step: tuple[Any, ...]) -> None:
    """Run one step: ("activate", id), ("deactivate", id), ("set_list", [ids]),
    ("fail_gpu", physical id), ("heal_gpu", physical id), ("restart",),
    ("restart_plain",) (no resiliency), ("stop",), ("start",)."""
    op, *args = step
    if op == "activate":
        driver.client.activate(*args)
    elif op == "deactivate":
        driver.client.deactivate(*args)
    elif op == "set_list":
        driver.client.set_activated_list(*args)
    elif op == "fail_gpu":
        driver.fail_gpu(*args)
    elif op == "heal_gpu":
        driver.heal_gpu(*args)
    elif op == "restart":
        driver.stop()
        driver.start()
    elif op == "restart_plain":
        driver.stop()
        driver.start(resiliency=False)
    elif op == "stop":
        driver.stop()
    elif op == "start":
        driver.start()
    elif op == "list":
        driver.client.list_partitions()
    elif op == "failed":
        driver.client.nvlink_failed_devices()
    elif op == "h100":
        driver.set_h100(True)
    else:
        raise ValueError(f"unknown step {step!r}")


def active_ids(client: FabricManager) -> set[int]:
    return {p.id for p in client.list_partitions() if p.active}


def active_in_fm(driver: Driver) -> set[int]:
    return driver.active()
