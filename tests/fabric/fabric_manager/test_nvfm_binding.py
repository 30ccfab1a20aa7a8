"""The ctypes binding's calls and error mapping against the compiled fake libnvfm."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from services.fabric.fabric_manager import nvfm
from services.fabric.fabric_manager.errors import (
    FabricManagerError,
    FabricManagerUnavailable,
    InvalidArgument,
    NotReady,
    NotSupported,
    PartitionConflict,
    PartitionNotActive,
    PartitionUnsupported,
    UnknownPartition,
)
from services.fabric.fabric_manager.interface import FabricManager
from services.fabric.fabric_manager.nvfm import NvfmFabricManager


def test_is_a_fabric_manager(nvfm_client) -> None:
    assert isinstance(nvfm_client, FabricManager)
    assert nvfm_client.backend == "nvfm"


@pytest.mark.parametrize(
    ("address", "unix_socket"),
    [("10.0.0.2:6666", False), ("/run/nvidia-fabricmanager/fm.sock", True)],
    ids=["tcp", "unix-socket"],
)
def test_connect_passes_the_address(fake_lib, libnvfm_path, address, unix_socket) -> None:
    client = NvfmFabricManager(library=libnvfm_path, address=address, unix_socket=unix_socket, timeout_ms=1234)
    client.connect()
    try:
        assert fake_lib.fakeFmLastAddress() == address.encode()
        assert fake_lib.fakeFmLastTimeoutMs() == 1234
        assert fake_lib.fakeFmLastAddressIsUnixSocket() == int(unix_socket)
    finally:
        client.close()


def test_round_trip_reaches_the_library_state(nvfm_client, fake_lib) -> None:
    nvfm_client.activate(1)
    nvfm_client.activate(6)
    assert [fake_lib.fakeFmIsActive(i) for i in range(15)] == [1 if i in (1, 6) else 0 for i in range(15)]
    nvfm_client.deactivate(6)
    assert fake_lib.fakeFmIsActive(6) == 0
    fake_lib.fakeFmStop()
    fake_lib.fakeFmStart(1)
    assert fake_lib.fakeFmAwaitingList() == 1
    nvfm_client.set_activated_list([1, 12])
    assert fake_lib.fakeFmAwaitingList() == 0
    assert {i for i in range(15) if fake_lib.fakeFmIsActive(i) == 1} == {1, 12}


def test_pci_bus_ids_are_normalised(nvfm_client, hgx_board) -> None:
    # The fake library answers 00000000:9A:00.0 like NVML; we give sysfs' 0000:9a:00.0.
    ids = {g.pci_bus_id for p in nvfm_client.list_partitions() for g in p.gpus}
    assert ids == {d.bdf for d in hgx_board.gpus}


def test_stopped_fabric_manager_is_unavailable_then_reconnects(nvfm_client, fake_lib) -> None:
    nvfm_client.activate(2)
    fake_lib.fakeFmStop()
    with pytest.raises(FabricManagerUnavailable) as info:
        nvfm_client.list_partitions()
    assert info.value.code == nvfm.FM_ST_CONNECTION_NOT_VALID
    with pytest.raises(FabricManagerUnavailable):
        nvfm_client.connect()
    fake_lib.fakeFmStart(1)
    with pytest.raises(NotReady) as not_ready:
        nvfm_client.activate(2)  # reconnected by itself; Fabric Manager forgot partition 2
    assert not_ready.value.code == nvfm.FM_ST_NOT_CONFIGURED
    nvfm_client.set_activated_list([2])
    assert [p.id for p in nvfm_client.list_partitions() if p.active] == [2]


def test_unsupported_partition_is_told_apart_from_unknown(nvfm_client, fake_lib) -> None:
    fake_lib.fakeFmInjectGpuFailure(2, 0)
    with pytest.raises(PartitionUnsupported) as unsupported:
        nvfm_client.activate(4)
    assert unsupported.value.code == nvfm.FM_ST_BADPARAM
    with pytest.raises(UnknownPartition) as unknown:
        nvfm_client.activate(30)
    assert unknown.value.code == nvfm.FM_ST_BADPARAM


@pytest.mark.parametrize("bad", [-1, 2**32, True, "1"], ids=["negative", "too-big", "bool", "str"])
def test_bad_partition_ids_are_refused_before_the_call(nvfm_client, bad) -> None:
    with pytest.raises(UnknownPartition, match="partition_id"):
        nvfm_client.activate(bad)


def test_unsupported_gpu_pci_comes_from_the_board_map(fake_lib, libnvfm_path, hgx_board) -> None:
    """A degraded GPU is in no supported partition: its PCI id comes from the board map."""
    fake_lib.fakeFmInjectGpuFailure(7, 1)
    bare = NvfmFabricManager(library=libnvfm_path)
    with_map = NvfmFabricManager(library=libnvfm_path, gpu_map=hgx_board.physical_id_map())
    try:
        [failed] = bare.nvlink_failed_devices().gpus
        assert failed.physical_id is None  # Fabric Manager never named GPU 7's address
        assert failed.pci_bus_id == hgx_board.physical_id_map()[7]
        [failed] = with_map.nvlink_failed_devices().gpus
        assert failed.physical_id == 7
        part13 = next(p for p in with_map.list_partitions() if p.id == 13)
        assert not part13.supported and part13.pci_bus_ids == (hgx_board.physical_id_map()[7],)
    finally:
        bare.close()
        with_map.close()


# (what, SDK function made to fail, its fmReturn_t, the client call, error expected)
ERROR_MAP = [
    (
        "timeout on activate",
        "fmActivateFabricPartition",
        nvfm.FM_ST_TIMEOUT,
        lambda c: c.activate(1),
        FabricManagerUnavailable,
    ),
    (
        "nvlink training failure",
        "fmActivateFabricPartition",
        nvfm.FM_ST_NVLINK_ERROR,
        lambda c: c.activate(1),
        PartitionUnsupported,
    ),
    (
        "initialising on activate",
        "fmActivateFabricPartition",
        nvfm.FM_ST_NOT_CONFIGURED,
        lambda c: c.activate(1),
        NotReady,
    ),
    (
        "not supported (not shared NVSwitch mode)",
        "fmGetSupportedFabricPartitions",
        nvfm.FM_ST_NOT_SUPPORTED,
        lambda c: c.list_partitions(),
        NotSupported,
    ),
    # A silent or gone FM: libnvfm returns GENERIC_ERROR after ~70 s -> unavailable.
    (
        "generic error on unsupported list",
        "fmGetUnsupportedFabricPartitions",
        nvfm.FM_ST_GENERIC_ERROR,
        lambda c: c.unsupported_partitions(),
        FabricManagerUnavailable,
    ),
    ("550+: not ready", "fmActivateFabricPartition", nvfm.FM_ST_NOT_READY, lambda c: c.activate(1), NotReady),
    (
        "550+: resource in use on activate",
        "fmActivateFabricPartition",
        nvfm.FM_ST_RESOURCE_IN_USE,
        lambda c: c.activate(1),
        PartitionConflict,
    ),
    (
        "550+: route programming error",
        "fmActivateFabricPartition",
        nvfm.FM_ST_PARTITION_ROUTE_PROGRAMMING_ERROR,
        lambda c: c.activate(1),
        PartitionUnsupported,
    ),
    (
        "550+: not in use on deactivate",
        "fmDeactivateFabricPartition",
        nvfm.FM_ST_RESOURCE_NOT_IN_USE,
        lambda c: c.deactivate(1),
        PartitionNotActive,
    ),
    (
        "in use on deactivate",
        "fmDeactivateFabricPartition",
        nvfm.FM_ST_IN_USE,
        lambda c: c.deactivate(1),
        FabricManagerError,
    ),
    (
        "not active on deactivate",
        "fmDeactivateFabricPartition",
        nvfm.FM_ST_UNINITIALIZED,
        lambda c: c.deactivate(1),
        PartitionNotActive,
    ),
    (
        "bad list, valid by the table",
        "fmSetActivatedFabricPartitions",
        nvfm.FM_ST_BADPARAM,
        lambda c: c.set_activated_list([1]),
        InvalidArgument,
    ),
    (
        "version mismatch on failed devices",
        "fmGetNvlinkFailedDevices",
        nvfm.FM_ST_VERSION_MISMATCH,
        lambda c: c.nvlink_failed_devices(),
        FabricManagerError,
    ),
    (
        "connection lost twice",
        "fmConnect",
        nvfm.FM_ST_CONNECTION_NOT_VALID,
        lambda c: c.connect(),
        FabricManagerUnavailable,
    ),
]


@pytest.mark.parametrize(("function", "rc", "call", "error"), [e[1:] for e in ERROR_MAP], ids=[e[0] for e in ERROR_MAP])
def test_return_codes_map_to_errors(nvfm_client, fake_lib, function, rc, call, error) -> None:
    if function == "fmDeactivateFabricPartition":
        nvfm_client.activate(1)  # the call itself would succeed but for the injected code
    assert fake_lib.fakeFmFailNext(function.encode(), rc) == 0
    with pytest.raises(error) as info:
        call(nvfm_client)
    assert type(info.value) is error
    assert info.value.code == rc
    assert nvfm.RETURN_NAMES[rc] in str(info.value) or error is not FabricManagerError


def test_stale_handle_is_replaced_transparently(nvfm_client, fake_lib) -> None:
    """One FM_ST_CONNECTION_NOT_VALID: the binding reconnects and the call goes through."""
    assert fake_lib.fakeFmFailNext(b"fmActivateFabricPartition", nvfm.FM_ST_CONNECTION_NOT_VALID) == 0
    nvfm_client.activate(5)
    assert fake_lib.fakeFmIsActive(5) == 1


def test_missing_library_is_unavailable(tmp_path: Path) -> None:
    client = NvfmFabricManager(library=tmp_path / "libnvfm.so")
    with pytest.raises(FabricManagerUnavailable, match="libnvfm not found"):
        client.connect()


def test_library_without_the_sdk_is_refused(tmp_path: Path) -> None:
    import subprocess

    src = tmp_path / "other.c"
    src.write_text("int something(void) { return 0; }\n")
    lib = tmp_path / "libother.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    with pytest.raises(FabricManagerUnavailable, match="no fmLibInit"):
        NvfmFabricManager(library=lib).connect()


def test_version_mismatch_is_an_error(nvfm_client, fake_lib, monkeypatch) -> None:
    monkeypatch.setattr(nvfm, "fmNvlinkFailedDevices_version", nvfm.fmNvlinkFailedDevices_version + (1 << 24))
    with pytest.raises(FabricManagerError) as info:
        nvfm_client.nvlink_failed_devices()
    assert info.value.code == nvfm.FM_ST_VERSION_MISMATCH


def test_racing_overlapping_activations_one_wins(nvfm_client) -> None:
    results: list[object] = []
    barrier = threading.Barrier(4)

    def go(pid: int) -> None:
        barrier.wait(timeout=30)
        try:
            nvfm_client.activate(pid)
            results.append(pid)
        except PartitionConflict as exc:
            results.append(exc)

    threads = [threading.Thread(target=go, args=(pid,)) for pid in (0, 1, 3, 7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    winners = [r for r in results if isinstance(r, int)]
    assert len(results) == 4 and len(winners) == 1  # all four share GPU 1
    assert [p.id for p in nvfm_client.list_partitions() if p.active] == winners
