"""``gpucaas fabric`` as a process: starts, serves the socket, stops on SIGTERM removing it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from core.fabric_client import FabricClient, FabricUnavailable
from devtools.fake_sysfs import FakeBoard
from devtools.waiting import wait_for
from tests.fabric.factories import holder, pcis

GPUCAAS = str(Path(sys.executable).parent / "gpucaas")


def test_cli_serves_and_stops(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, hgx_board: FakeBoard) -> None:
    sock = tmp_path_factory.mktemp("cli") / "fabric.sock"
    env = {
        **os.environ,
        "GPUCAAS_FABRIC_SOCKET": str(sock),
        "GPUCAAS_FABRIC_STATE_DIR": str(tmp_path / "st"),
        "GPUCAAS_FABRIC_FM_BACKEND": "simulator",
        "GPUCAAS_FABRIC_BOARD": str(hgx_board.root),
        "GPUCAAS_FABRIC_SYSFS_ROOT": str(hgx_board.sysfs),
        "GPUCAAS_FABRIC_VM_ENABLED": "false",
        "GPUCAAS_FABRIC_PUBLISH": "false",
    }
    proc = subprocess.Popen(
        [GPUCAAS, "fabric", "--node-name", "n1"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        with FabricClient(sock, timeout=10) as c:

            def serving() -> dict | None:
                try:
                    return c.health()
                except FabricUnavailable:
                    if proc.poll() is not None:
                        pytest.fail(f"gpucaas fabric exited: {proc.stdout.read() if proc.stdout else ''}")
                    return None

            health = wait_for(serving, 120, what="gpucaas fabric to serve its socket")
            assert health["fabric_manager"] == {"reachable": True, "backend": "simulator", "message": "", "replays": 0}
            assert c.activate(holder(1, 2), pcis(1, 2))["partition_ids"] == [7, 8]
            # The GPUs were reset through sysfs before their partitions were activated.
            assert hgx_board.reset_log() == {p: 1 for p in pcis(1, 2)}
            # H100 simulator: FM gives no PCI bus ids; the host layout (the board) does.
            topo = c.topology()
            assert {g["physical_id"]: g["pci_bus_id"] for g in topo["gpus"]} == hgx_board.physical_id_map()
            assert {g["pci_source"] for g in topo["gpus"]} == {"layout"}
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert not sock.exists()
    assert (tmp_path / "st" / "activations.json").exists()


def test_cli_rejects_bad_settings(tmp_path: Path) -> None:
    res = subprocess.run(
        [GPUCAAS, "fabric", "--domain-type", "xen", "--fm-backend", "simulator", "--state-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode != 0
    assert "--domain-type" in res.stdout + res.stderr  # the flag generated from the domain_type field


def test_cli_without_libnvfm_says_what_to_install_or_set(tmp_path: Path) -> None:
    """No GPUCAAS_FABRIC_FM_BACKEND and no libnvfm: exit non-zero with one line naming the fix."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUCAAS_FABRIC_")}
    res = subprocess.run([GPUCAAS, "fabric"], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert res.returncode != 0
    lines = [ln for ln in (res.stdout + res.stderr).splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    assert "libnvfm not found" in lines[0] and "install NVIDIA's libnvfm1" in lines[0]
    assert "GPUCAAS_FABRIC_FM_LIBRARY" in lines[0] and "GPUCAAS_FABRIC_FM_BACKEND=simulator" in lines[0]


def test_nvfm_forced_with_a_missing_library_path_names_it(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUCAAS_FABRIC_")}
    env |= {"GPUCAAS_FABRIC_FM_BACKEND": "nvfm", "GPUCAAS_FABRIC_FM_LIBRARY": str(tmp_path / "libnvfm.so.1")}
    res = subprocess.run([GPUCAAS, "fabric"], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert res.returncode == 1
    assert res.stderr.strip().splitlines() == [
        f"gpucaas fabric: libnvfm not found at {tmp_path / 'libnvfm.so.1'}: install NVIDIA's libnvfm1 "
        "(Fabric Manager SDK, the driver branch of the service VM's nv-fabricmanager) on the node or set "
        "GPUCAAS_FABRIC_FM_LIBRARY to it; for development only, set GPUCAAS_FABRIC_FM_BACKEND=simulator"
    ]
