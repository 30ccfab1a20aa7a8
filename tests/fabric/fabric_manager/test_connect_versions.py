"""fmConnectParams v1 (FM 525/535) or v2 (FM 550+), chosen by the loaded library's version.

The C double is compiled twice: as a 535 library (expects v1) and, with
-DNVFM_FAKE_API_V2, as a 550 one (expects v2, whose addressType replaces
addressIsUnixSocket), each under NVIDIA's file naming ``libnvfm.so.<driver version>``
with ``libnvfm.so.1`` linking to it.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from services.fabric.fabric_manager import nvfm
from services.fabric.fabric_manager.nvfm import NvfmFabricManager, library_branch, load_libnvfm

FAKE_SRC = Path(__file__).parent / "libnvfm_fake" / "nvfm_fake.c"


def _build(out: Path, *defines: str) -> Path:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.fail("gcc not found: run `make system-deps` to install it")
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
            *defines,
            "-o",
            str(out),
            str(FAKE_SRC),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return out


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d535 = tmp_path_factory.mktemp("fm535")
    d550 = tmp_path_factory.mktemp("fm550")
    dplain = tmp_path_factory.mktemp("fmplain")
    v1 = _build(d535 / "libnvfm.so.535.216.01")
    v2 = _build(d550 / "libnvfm.so.550.54.15", "-DNVFM_FAKE_API_V2")
    (d535 / "libnvfm.so.1").symlink_to(v1.name)
    (d550 / "libnvfm.so.1").symlink_to(v2.name)
    plain = _build(dplain / "libnvfm.so", "-DNVFM_FAKE_API_V2")  # a 550 library under a name saying nothing
    return {"535": d535 / "libnvfm.so.1", "550": d550 / "libnvfm.so.1", "plain-550": plain}


def _controls(path: Path) -> ctypes.CDLL:
    lib = load_libnvfm(path)
    lib.fakeFmReset()
    return lib


def test_branch_is_read_from_the_real_file_name(builds) -> None:
    assert library_branch(builds["535"]) == 535
    assert library_branch(builds["550"]) == 550
    assert library_branch(builds["plain-550"]) is None


@pytest.mark.parametrize(("build", "expected"), [("535", 1), ("550", 2)])
def test_connect_uses_the_params_the_library_expects(builds, build: str, expected: int) -> None:
    lib = _controls(builds[build])
    client = NvfmFabricManager(library=builds[build], address="/run/fm.sock", unix_socket=True)
    assert client.connect_params_version() == expected
    client.connect()
    try:
        assert lib.fakeFmLastConnectVersion() == expected
        assert lib.fakeFmLastAddressIsUnixSocket() == 1  # addressType on v2, the flag on v1
        assert len(client.list_partitions()) == 15
    finally:
        client.close()


def test_a_misnamed_550_library_is_still_reached(builds, caplog) -> None:
    lib = _controls(builds["plain-550"])
    client = NvfmFabricManager(library=builds["plain-550"], address="10.0.0.2:6666")
    client.connect()  # v1 refused with FM_ST_VERSION_MISMATCH, then v2
    try:
        assert lib.fakeFmLastConnectVersion() == 2 and client.connect_params_version() == 2
        assert "takes v2" in caplog.text
    finally:
        client.close()


def test_configured_version_wins(builds) -> None:
    _controls(builds["550"])
    client = NvfmFabricManager(library=builds["550"], address="10.0.0.2", connect_params_version=2)
    assert client.connect_params_version() == 2
    with pytest.raises(ValueError, match="connect_params_version"):
        NvfmFabricManager(library=builds["550"], connect_params_version=3)


def test_v2_layout_matches_the_550_build(builds) -> None:
    lib = _controls(builds["550"])
    lib.fakeFmLayout.argtypes = [ctypes.c_char_p]
    lib.fakeFmLayout.restype = ctypes.c_long
    assert ctypes.sizeof(nvfm.fmConnectParams_v2) == lib.fakeFmLayout(b"fmConnectParams_v2")
    assert nvfm.fmConnectParams_v2.addressType.offset == lib.fakeFmLayout(b"fmConnectParams_v2.addressType")
    assert nvfm.fmConnectParams_v2_version == lib.fakeFmLayout(b"fmConnectV2Params_version2")
