"""``gpucaas kube-emulator`` as a process, and persistence of its objects to a file across restarts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from kubernetes import client, config

from gpucaas.devtools.kube_emulator import KubeEmulator
from gpucaas.devtools.waiting import wait_for
from tests.kube_emulator.conftest import pod_body


def _start(kubeconfig: Path, persist: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUCAAS_KUBE_EMULATOR_")}
    return subprocess.Popen(
        [sys.executable, "-c", "from gpucaas.programs.cli import app; app()", "kube-emulator", "--port", "0",
         "--kubeconfig", str(kubeconfig), "--persist", str(persist)],
        cwd=Path(__file__).resolve().parents[2], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _wait_file(path: Path, proc: subprocess.Popen[bytes]) -> None:
    def written() -> bool:
        assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else "exited"
        return path.exists()

    wait_for(written, 60, interval=0.05, what="the kubeconfig written")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()


def test_cli_process_serves_and_persists(tmp_path: Path) -> None:
    kc, state = tmp_path / "kubeconfig", tmp_path / "state.json"
    proc = _start(kc, state)
    try:
        _wait_file(kc, proc)
        api = config.new_client_from_config(config_file=str(kc))
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": "tenant-x"}})
        pod = core.create_namespaced_pod("tenant-x", pod_body("p"))
        leases = client.CustomObjectsApi(api).list_cluster_custom_object("gpucaas.dev", "v1alpha1", "gpuleases")
        assert leases["items"] == []  # the project's CRDs are installed
        api.close()
    finally:
        _stop(proc)
    saved = json.loads(state.read_text())
    assert any(o["object"]["metadata"]["name"] == "p" for o in saved["objects"])

    kc.unlink()
    proc = _start(kc, state)
    try:
        _wait_file(kc, proc)
        api = config.new_client_from_config(config_file=str(kc))
        core = client.CoreV1Api(api)
        again = core.read_namespaced_pod("p", "tenant-x")
        assert again.metadata.uid == pod.metadata.uid
        cm = core.create_namespaced_config_map("tenant-x", {"metadata": {"name": "c"}})
        assert int(cm.metadata.resource_version) > int(pod.metadata.resource_version)
        api.close()
    finally:
        _stop(proc)


def test_in_process_persistence_keeps_crds_objects_and_logs(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    with KubeEmulator(persist_path=state, install_project_crds=True) as emu:
        api = config.new_client_from_config(config_file=str(emu.write_kubeconfig(tmp_path / "kc")))
        custom = client.CustomObjectsApi(api)
        custom.create_cluster_custom_object("gpucaas.dev", "v1alpha1", "tenancies", {
            "apiVersion": "gpucaas.dev/v1alpha1", "kind": "Tenancy", "metadata": {"name": "acme"}, "spec": {}})
        client.CoreV1Api(api).create_namespaced_pod("default", pod_body("p"))
        emu.set_pod_log("default", "p", "hello\n")
        api.close()
    with KubeEmulator(persist_path=state) as emu:
        api = config.new_client_from_config(config_file=str(emu.write_kubeconfig(tmp_path / "kc2")))
        custom = client.CustomObjectsApi(api)
        assert custom.get_cluster_custom_object("gpucaas.dev", "v1alpha1", "tenancies", "acme")["spec"]["gpuQuota"] == 8
        assert client.CoreV1Api(api).read_namespaced_pod_log("p", "default") == "hello\n"
        api.close()


async def test_async_context_manager() -> None:
    import aiohttp

    async with KubeEmulator() as emu, aiohttp.ClientSession() as http:
        async with http.get(f"{emu.url}/api/v1/namespaces/default",
                            headers={"Authorization": f"Bearer {emu.admin_token}"}) as resp:
            assert resp.status == 200
            assert (await resp.json())["metadata"]["name"] == "default"
