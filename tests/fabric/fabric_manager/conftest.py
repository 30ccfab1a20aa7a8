"""Fixtures for the Fabric Manager backends: the simulator and the compiled fake libnvfm."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.fake_sysfs import FakeBoard
from services.fabric.fabric_manager.nvfm import NvfmFabricManager, load_libnvfm
from services.fabric.fabric_manager.simulator import SimulatedFabric, SimulatedFabricManager

FAKE_SRC = Path(__file__).parent / "libnvfm_fake"


@pytest.fixture(scope="session")
def libnvfm_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake libnvfm compiled from libnvfm_fake/ into a temporary directory."""
    gcc = shutil.which("gcc")
    if gcc is None:  # the Makefile installs gcc (APT_PACKAGES); say so rather than skip
        pytest.fail("gcc not found: run `make system-deps` to install it")
    out = tmp_path_factory.mktemp("libnvfm") / "libnvfm.so"
    subprocess.run(
        [
            gcc,
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-O1",
            "-shared",
            "-fPIC",
            "-pthread",
            "-o",
            str(out),
            str(FAKE_SRC / "nvfm_fake.c"),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return out


@pytest.fixture(scope="session")
def libnvfm(libnvfm_path: Path) -> ctypes.CDLL:
    """The fake library loaded through the binding's loader, its test controls declared."""
    lib = load_libnvfm(libnvfm_path)
    lib.fakeFmLayout.argtypes = [ctypes.c_char_p]
    lib.fakeFmLayout.restype = ctypes.c_long
    lib.fakeFmLastAddress.restype = ctypes.c_char_p
    lib.fakeFmSetGpu.argtypes = [ctypes.c_uint, ctypes.c_char_p]
    lib.fakeFmInjectSwitchFailure.argtypes = [ctypes.c_char_p, ctypes.c_uint]
    lib.fakeFmFailNext.argtypes = [ctypes.c_char_p, ctypes.c_int]
    return lib


def reset_fake(lib: ctypes.CDLL, gpu_map: dict[int, str]) -> None:
    """A fresh Fabric Manager in the fake library, knowing these GPUs."""
    lib.fakeFmReset()
    for physical_id, bdf in gpu_map.items():
        # Fabric Manager writes NVML's form: 8-digit domain, upper case.
        assert lib.fakeFmSetGpu(physical_id, f"0000{bdf}".upper().encode()) == 0


@pytest.fixture
def fake_lib(libnvfm: ctypes.CDLL, hgx_board: FakeBoard) -> Iterator[ctypes.CDLL]:
    """The loaded fake library, reset to a fresh Fabric Manager with the board's GPUs.

    The library is loaded once per process (its state is process-global), so each
    test starts from fakeFmReset().
    """
    reset_fake(libnvfm, hgx_board.physical_id_map())
    yield libnvfm
    libnvfm.fakeFmReset()


@pytest.fixture
def nvfm_client(fake_lib: ctypes.CDLL, libnvfm_path: Path, hgx_board: FakeBoard) -> Iterator[NvfmFabricManager]:
    """The binding as the factory builds it: the board's physical id map as fallback."""
    client = NvfmFabricManager(
        library=libnvfm_path, address="10.0.0.2:6666", timeout_ms=2000, gpu_map=hgx_board.physical_id_map()
    )
    client.connect()
    yield client
    client.close()


@pytest.fixture
def sim_fabric(hgx_board: FakeBoard) -> SimulatedFabric:
    return SimulatedFabric(hgx_board.physical_id_map())


@pytest.fixture
def sim_client(sim_fabric: SimulatedFabric) -> Iterator[SimulatedFabricManager]:
    client = SimulatedFabricManager(sim_fabric)
    client.connect()
    yield client
    client.close()


@pytest.fixture(params=["simulator", "nvfm"])
def driver(request: pytest.FixtureRequest):
    """Each backend in turn, with its way of playing Fabric Manager events."""
    from tests.fabric.fabric_manager.drivers import LibDriver, SimDriver

    if request.param == "simulator":
        client = request.getfixturevalue("sim_client")
        return SimDriver(client, client.fabric)
    return LibDriver(request.getfixturevalue("nvfm_client"), request.getfixturevalue("fake_lib"))
