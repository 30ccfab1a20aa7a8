"""Choose the Fabric Manager backend: NVIDIA's libnvfm (the default) or, only when
asked for by name, the simulator. The one place that decides."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path

from services.fabric.fabric_manager.interface import BACKENDS, FabricManager

logger = logging.getLogger(__name__)


def load_gpu_map(board: str | os.PathLike[str]) -> dict[int, str]:
    """Physical id -> PCI bus id from a board description.

    ``board`` is a directory holding ``board.json`` (the tree ``fake_sysfs``
    builds) or a JSON file: either that board format (``devices`` with ``kind``,
    ``bdf``, ``physical_id``) or a plain ``{"<physical id>": "<pci bus id>"}`` map.
    """
    path = Path(board)
    if path.is_dir():
        path = path / "board.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"board: {path} does not exist") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"board: {path} is not JSON: {exc}") from exc
    if isinstance(data, dict) and "devices" in data:
        gpu_map = {
            int(d["physical_id"]): str(d["bdf"])
            for d in data["devices"]
            if d.get("kind") == "gpu" and d.get("physical_id") is not None
        }
    elif isinstance(data, dict):
        try:
            gpu_map = {int(k): str(v) for k, v in data.items()}
        except ValueError:
            raise ValueError(f"board: {path}: keys must be physical ids (integers)") from None
    else:
        raise ValueError(f"board: {path} holds neither a board description nor an id map")
    if not gpu_map:
        raise ValueError(f"board: {path} names no GPU with a physical id")
    return gpu_map


class LibraryMissing(Exception):
    """The nvfm backend was chosen but no libnvfm can be found (the message says the fix)."""


def missing_library_message(library: str | os.PathLike[str] | None) -> str:
    where = f"at {os.fspath(library)}" if library else "by the dynamic loader (find_library('nvfm'))"
    return (
        f"libnvfm not found {where}: install NVIDIA's libnvfm1 (Fabric Manager SDK, the driver "
        "branch of the service VM's nv-fabricmanager) on the node or set GPUCAAS_FABRIC_FM_LIBRARY "
        "to it; for development only, set GPUCAAS_FABRIC_FM_BACKEND=simulator"
    )


def make_fabric_manager(
    *,
    backend: str = "nvfm",
    library: str | os.PathLike[str] | None = None,
    address: str = "127.0.0.1",
    unix_socket: bool = False,
    timeout_ms: int = 5000,
    gpu_map: Mapping[int, str] | None = None,
    board: str | os.PathLike[str] | None = None,
    resiliency: bool = True,
    h100: bool = True,
    deadline_s: float | None = None,
    connect_params_version: int | None = None,
    require_library: bool = False,
) -> FabricManager:
    """Build the Fabric Manager client the settings ask for.

    backend: "nvfm" (the default: NVIDIA's libnvfm) or "simulator" (only when asked
    for: the sandbox and tests). There is no silent fallback: a production node
    never runs on the simulator by accident. ``require_library``: raise
    :class:`LibraryMissing` now when libnvfm cannot be found (the service's start-up
    check); otherwise a missing library shows as FabricManagerUnavailable on connect.
    library: path to libnvfm.so; default: what ``find_library('nvfm')`` finds.
    address / unix_socket / timeout_ms: where Fabric Manager's API listens (nvfm).
    gpu_map or board: physical id -> PCI bus id (the simulator's board; the
    binding's fallback where Fabric Manager gives no PCI bus id).
    resiliency: the simulator restarts in restart mode (waits for the list).
    h100: the simulator behaves as Fabric Manager on H100 (no PCI bus id/UUID in
    partition info, no degradation lists).
    deadline_s: wrap the nvfm client so every call returns within it
    (``deadline.DeadlineFabricManager``).
    connect_params_version: fmConnectParams v1/v2 (None: by the library's version).
    Nothing connects here; call ``connect()``.
    """
    if backend not in BACKENDS:
        raise ValueError(
            f"backend: {backend!r} is not one of {list(BACKENDS)} (the simulator is only used when asked for by name)"
        )
    if gpu_map is None and board is not None:
        gpu_map = load_gpu_map(board)

    if backend == "nvfm":
        from services.fabric.fabric_manager import nvfm

        found = nvfm.find_libnvfm(library)
        if found is None and require_library:
            raise LibraryMissing(missing_library_message(library))
        logger.debug(
            "Fabric Manager backend: nvfm (library %s, address %s%s)",
            found or library,
            address,
            " unix socket" if unix_socket else "",
        )

        def build() -> FabricManager:
            return nvfm.NvfmFabricManager(
                library=library,
                address=address,
                unix_socket=unix_socket,
                timeout_ms=timeout_ms,
                gpu_map=gpu_map,
                connect_params_version=connect_params_version,
            )

        if deadline_s is None:
            return build()
        from services.fabric.fabric_manager.deadline import DeadlineFabricManager

        return DeadlineFabricManager(build, deadline_s=deadline_s, connect_deadline_s=deadline_s + timeout_ms / 1000)

    from services.fabric.fabric_manager.simulator import SimulatedFabric, SimulatedFabricManager

    logger.warning("Fabric Manager backend: SIMULATOR (asked for; no NVSwitch is driven)")
    return SimulatedFabricManager(SimulatedFabric(gpu_map, resiliency=resiliency, h100=h100))
