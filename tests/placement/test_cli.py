"""``gpucaas scheduler-extender`` as a process: reads the cluster, answers the scheduler."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
from kubernetes import client

from core import crds
from devtools.ports import free_port
from devtools.waiting import wait_for
from tests.placement.factories import fabric_status, pod


def test_the_command_serves_the_extender_from_the_cluster(kubeconfig: Path, k8s: client.ApiClient) -> None:
    custom = client.CustomObjectsApi(k8s)
    body = {"apiVersion": crds.API_VERSION, "kind": "FabricState", "metadata": {"name": "gpu-node-a"}}
    custom.create_cluster_custom_object(crds.GROUP, crds.VERSION, crds.FABRICSTATE_PLURAL, body)
    custom.patch_cluster_custom_object_status(
        crds.GROUP,
        crds.VERSION,
        crds.FABRICSTATE_PLURAL,
        "gpu-node-a",
        {"status": fabric_status(active={5: "gpus:x"})},  # pair {5,7} busy
    )
    port = free_port()
    env = {**os.environ, "GPUCAAS_PLACEMENT_KUBECONFIG": str(kubeconfig), "GPUCAAS_LOG_LEVEL": "WARNING"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from gpucaas.cli import app; app()",
            "scheduler-extender",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(timeout=5) as http:

            def ready() -> bool:
                try:
                    if http.get(f"{url}/readyz").status_code == 200 and http.get(f"{url}/v1/nodes").json()["nodes"]:
                        return True
                except httpx.TransportError:
                    pass
                assert proc.poll() is None, proc.stdout.read().decode()  # type: ignore[union-attr]
                return False

            wait_for(ready, 60, what="the extender to become ready with a node")
            [node] = http.get(f"{url}/v1/nodes").json()["nodes"]
            assert node["free"] == [1, 2, 3, 4, 6, 8]
            result = http.post(f"{url}/filter", json={"Pod": pod(4), "Nodes": None, "NodeNames": ["gpu-node-a"]}).json()
            assert result["NodeNames"] == ["gpu-node-a"]  # quad 1-4 is free
            result = http.post(f"{url}/filter", json={"Pod": pod(8), "Nodes": None, "NodeNames": ["gpu-node-a"]}).json()
            assert result["NodeNames"] == [] and "gpu-node-a" in result["FailedNodes"]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
