"""`gpucaas device-plugin --leases` as a process: the lease agent runs beside the plugin, writes a
lease per GPU through the Kubernetes API, and its logs are JSON lines when asked."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from kubernetes import client

from core.lease_store import LeaseStore
from devtools.fake_sysfs import FakeBoard
from devtools.waiting import wait_for
from tests.fixtures.fake_kubelet import FakeKubelet


def test_leases_are_kept_by_the_device_plugin_process(
    hgx_board: FakeBoard, fake_kubelet: FakeKubelet, kubeconfig: Path, k8s: client.ApiClient, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUCAAS_")}
    env |= {"GPUCAAS_LOG_FORMAT": "json", "GPUCAAS_FIRMWARE_ROM_TOGGLE": "false"}
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
        "--no-fabric-required",
        "--metrics-port",
        "-1",
        "--node-name",
        "n1",
        "--pod-resources-socket",
        str(fake_kubelet.pod_resources_socket),
        "--leases",
        "--kubeconfig",
        str(kubeconfig),
        "--lease-interval",
        "0.2",
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    store = LeaseStore(k8s)
    try:
        fake_kubelet.wait_for_plugin("nvidia.com/gpu", timeout=60)

        # a lease is created, then its state written through the status subresource: wait for both
        def stated() -> list[str] | None:
            states = [(lease.get("status") or {}).get("state") for lease in store.list("n1")]
            return states if len(states) == 8 and all(states) else None

        assert set(wait_for(stated, what="a GPULease with a state per GPU of node n1")) == {"Free"}
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    records = [json.loads(line) for line in out.splitlines() if line.strip()]  # every line is one JSON object
    messages = [r["message"] for r in records]
    assert any("no golden firmware configured" in m for m in messages)  # the lease agent's own warning
    assert any("registered nvidia.com/gpu" in m for m in messages)
