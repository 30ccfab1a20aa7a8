"""Choose the Fabric Manager backend: the libnvfm binding when the library is
there (or asked for), the simulator otherwise. The one place that decides."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path

from services.fabric.fabric_manager.interface import BACKENDS, FabricManager

logger = logging.getLogger(__name__)

AUTO = "auto"


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


def make_fabric_manager(
    *,
    backend: str = AUTO,
    library: str | os.PathLike[str] | None = None,
    address: str = "127.0.0.1",
    unix_socket: bool = False,
    timeout_ms: int = 5000,
    gpu_map: Mapping[int, str] | None = None,
    board: str | os.PathLike[str] | None = None,
    resiliency: bool = True,
) -> FabricManager:
    """Build the Fabric Manager client the settings ask for.

    backend: "auto" (libnvfm when found, else the simulator), "nvfm" (forced; a
    missing library shows up as FabricManagerUnavailable on connect) or "simulator".
    library: path to libnvfm.so; default: what ``find_library('nvfm')`` finds.
    address / unix_socket / timeout_ms: where Fabric Manager's API listens (nvfm).
    gpu_map or board: physical id -> PCI bus id (the simulator's board; the
    binding's fallback for GPUs only named in unsupported partitions).
    resiliency: the simulator restarts in resiliency mode (waits for the list).
    Nothing connects here; call ``connect()``.
    """
    if backend not in (AUTO, *BACKENDS):
        raise ValueError(f"backend: {backend!r} is not one of {[AUTO, *BACKENDS]}")
    if gpu_map is None and board is not None:
        gpu_map = load_gpu_map(board)

    from services.fabric.fabric_manager import nvfm

    found = nvfm.find_libnvfm(library)
    chosen = backend
    if backend == AUTO:
        chosen = "nvfm" if found else "simulator"
    if chosen == "nvfm":
        if found is None:
            logger.warning("Fabric Manager backend nvfm forced but libnvfm not found (%s)",
                           library or "find_library('nvfm')")
        logger.info("Fabric Manager backend: nvfm (library %s, address %s%s)",
                    found or library, address, " unix socket" if unix_socket else "")
        return nvfm.NvfmFabricManager(
            library=library, address=address, unix_socket=unix_socket,
            timeout_ms=timeout_ms, gpu_map=gpu_map,
        )

    from services.fabric.fabric_manager.simulator import SimulatedFabric, SimulatedFabricManager

    logger.info("Fabric Manager backend: simulator (%s)",
                "libnvfm not found" if backend == AUTO else "asked for")
    return SimulatedFabricManager(SimulatedFabric(gpu_map, resiliency=resiliency))
