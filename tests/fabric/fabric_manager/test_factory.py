"""The factory picks the backend and reads the board's physical id map."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from services.fabric.fabric_manager.factory import LibraryMissing, load_gpu_map, make_fabric_manager
from services.fabric.fabric_manager.nvfm import NvfmFabricManager
from services.fabric.fabric_manager.simulator import SimulatedFabricManager


def test_default_backend_is_nvfm_never_a_silent_simulator(tmp_path: Path) -> None:
    fm = make_fabric_manager(library=tmp_path / "libnvfm.so")
    assert isinstance(fm, NvfmFabricManager) and fm.backend == "nvfm"


def test_missing_library_is_a_clear_error_naming_the_fix(tmp_path: Path) -> None:
    with pytest.raises(LibraryMissing) as exc:
        make_fabric_manager(library=tmp_path / "libnvfm.so", require_library=True)
    text = str(exc.value)
    assert "install NVIDIA's libnvfm1" in text and "GPUCAAS_FABRIC_FM_LIBRARY" in text
    assert "GPUCAAS_FABRIC_FM_BACKEND=simulator" in text and "\n" not in text


def test_auto_is_no_longer_a_backend() -> None:
    with pytest.raises(ValueError, match="only used when asked for by name"):
        make_fabric_manager(backend="auto")


def test_nvfm_with_library_is_the_binding(libnvfm_path: Path, fake_lib, caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="services.fabric.fabric_manager.factory")
    fm = make_fabric_manager(library=libnvfm_path, address="/run/fm.sock", unix_socket=True)
    assert isinstance(fm, NvfmFabricManager) and fm.backend == "nvfm"
    assert "backend: nvfm" in caplog.text
    fm.connect()
    assert fake_lib.fakeFmLastAddressIsUnixSocket() == 1
    fm.close()


def test_nvfm_without_library_fails_on_connect(tmp_path: Path) -> None:
    from services.fabric.fabric_manager.errors import FabricManagerUnavailable

    fm = make_fabric_manager(backend="nvfm", library=tmp_path / "missing.so")
    assert fm.backend == "nvfm"
    with pytest.raises(FabricManagerUnavailable, match="libnvfm not found"):
        fm.connect()


def test_deadline_wraps_the_binding(libnvfm_path: Path, fake_lib) -> None:
    from services.fabric.fabric_manager.deadline import DeadlineFabricManager

    fm = make_fabric_manager(library=libnvfm_path, address="10.0.0.2", deadline_s=2.0)
    assert isinstance(fm, DeadlineFabricManager) and fm.backend == "nvfm"
    fm.connect()
    assert len(fm.list_partitions()) == 15
    fm.close()


def test_forced_simulator_ignores_a_present_library(libnvfm_path: Path) -> None:
    assert make_fabric_manager(backend="simulator", library=libnvfm_path).backend == "simulator"


def test_unknown_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="backend: 'dcgm' is not one of"):
        make_fabric_manager(backend="dcgm")


def test_simulator_takes_the_board(hgx_board) -> None:
    fm = make_fabric_manager(backend="simulator", board=hgx_board.root)
    assert isinstance(fm, SimulatedFabricManager)
    assert fm.fabric.gpu_map == hgx_board.physical_id_map()


def test_simulator_is_h100_by_default() -> None:
    fm = make_fabric_manager(backend="simulator")
    assert fm.fabric.h100
    assert {g.pci_bus_id for p in fm.list_partitions() for g in p.gpus} == {""}


def test_simulator_without_resiliency_comes_back_ready() -> None:
    fm = make_fabric_manager(backend="simulator", resiliency=False)
    fm.activate(1)
    fm.restart()
    fm.activate(3)


@pytest.mark.parametrize(
    ("content", "error"),
    [
        (None, "does not exist"),
        ("{nope", "is not JSON"),
        ("[1, 2]", "neither a board description nor an id map"),
        ('{"one": "0000:18:00.0"}', "keys must be physical ids"),
        ('{"devices": []}', "names no GPU"),
    ],
    ids=["missing", "not-json", "a-list", "bad-keys", "no-gpus"],
)
def test_bad_board_files_are_refused(tmp_path: Path, content, error) -> None:
    path = tmp_path / "board.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=error):
        load_gpu_map(path)


def test_plain_id_map_file(tmp_path: Path) -> None:
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps({"1": "0000:3a:00.0", "2": "0000:18:00.0"}))
    assert load_gpu_map(path) == {1: "0000:3a:00.0", 2: "0000:18:00.0"}


def test_library_may_be_a_soname_the_loader_resolves() -> None:
    from services.fabric.fabric_manager.nvfm import find_libnvfm

    assert find_libnvfm("libc.so.6") == "libc.so.6"  # any loadable soname: the loader decides
    assert find_libnvfm("libnvfm-not-here.so.1") is None
