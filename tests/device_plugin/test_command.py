"""`gpucaas device-plugin` as a process: registers with the kubelet, serves metrics, stops on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from devtools.fake_sysfs import FakeBoard
from tests.fixtures.fake_kubelet import FakeKubelet


def test_command_runs_end_to_end(hgx_board: FakeBoard, fake_kubelet: FakeKubelet, tmp_path: Path) -> None:
    env = dict(os.environ, GPUCAAS_FABRIC_REQUIRED="false", GPUCAAS_METRICS_PORT="0", GPUCAAS_NODE_NAME="n1")
    cmd = [
        sys.executable,
        "-c",
        "from gpucaas.cli import app; app()",
        "device-plugin",
        "--sysfs-root",
        str(hgx_board.sysfs),
        "--dev-root",
        str(hgx_board.dev),
        "--device-plugin-dir",
        str(fake_kubelet.plugin_dir),
        "--cdi-dir",
        str(tmp_path / "cdi"),
        "--fabric-socket",
        "",
        "--pod-resources-socket",
        str(fake_kubelet.pod_resources_socket),
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        conn = fake_kubelet.wait_for_plugin("nvidia.com/gpu", timeout=60)
        assert len(conn.healthy()) == 8
        alloc = fake_kubelet.admit("tenant-a", "p", "nvidia.com/gpu", 2)
        assert alloc.response.envs["GPUCAAS_NVLINK"] == "false"  # no fabric service: NVLink-less, allowed
        assert (tmp_path / "cdi" / "gpucaas-nvidia.com-gpu.json").exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "registered nvidia.com/gpu" in out and "metrics on :" in out
    assert not (fake_kubelet.plugin_dir / "gpucaas-nvidia.com_gpu.sock").exists()
