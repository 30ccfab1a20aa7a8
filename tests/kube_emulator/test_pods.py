"""Pod subresources: /log (stored per pod, set by a node agent; follow streams), /binding, /eviction."""

from __future__ import annotations

import threading

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from gpucaas.devtools.waiting import wait_for
from tests.kube_emulator.conftest import pod_body


def test_log_set_through_python_api(core: client.CoreV1Api, kube_emulator) -> None:
    core.create_namespaced_pod("default", pod_body("p"))
    assert core.read_namespaced_pod_log("p", "default") == ""
    kube_emulator.set_pod_log("default", "p", "line 1\n")
    kube_emulator.set_pod_log("default", "p", "line 2\nline 3\n")
    assert core.read_namespaced_pod_log("p", "default") == "line 1\nline 2\nline 3\n"
    assert core.read_namespaced_pod_log("p", "default", tail_lines=1) == "line 3\n"
    kube_emulator.set_pod_log("default", "p", "fresh\n", append=False)
    assert core.read_namespaced_pod_log("p", "default") == "fresh\n"


def test_log_set_through_emulator_endpoint(core: client.CoreV1Api, kube_emulator) -> None:
    body = pod_body("p")
    body["spec"]["containers"].append({"name": "side", "image": "x"})
    core.create_namespaced_pod("default", body)
    http = urllib3.PoolManager()
    base = f"{kube_emulator.url}/emulator/v1/namespaces/default/pods/p/log"
    auth = {"Authorization": f"Bearer {kube_emulator.admin_token}"}
    assert http.request("POST", base + "?container=side", body=b"from side\n", headers=auth).status == 200
    assert http.request("POST", base + "?container=main", body=b"from main\n", headers=auth).status == 200
    http.clear()
    assert core.read_namespaced_pod_log("p", "default", container="side") == "from side\n"
    assert core.read_namespaced_pod_log("p", "default", container="main") == "from main\n"
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod_log("p", "default")  # two containers: one must be named
    assert err.value.status == 400


def test_log_follow_streams_until_pod_terminates(core: client.CoreV1Api, kube_emulator) -> None:
    core.create_namespaced_pod("default", pod_body("p"))
    kube_emulator.set_pod_log("default", "p", "start\n")
    chunks: list[str] = []

    def follow() -> None:
        resp = core.read_namespaced_pod_log("p", "default", follow=True, _preload_content=False,
                                            _request_timeout=60)
        for chunk in resp.stream(64):
            chunks.append(chunk.decode())
        resp.release_conn()

    t = threading.Thread(target=follow)
    t.start()
    wait_for(lambda: "start\n" in "".join(chunks), 30, interval=0.05, what="the first log chunk")
    kube_emulator.set_pod_log("default", "p", "more\n")
    wait_for(lambda: "more\n" in "".join(chunks), 30, interval=0.05, what="the appended log chunk")
    assert t.is_alive(), "follow keeps streaming while the pod runs"
    core.patch_namespaced_pod_status("p", "default", {"status": {"phase": "Succeeded"}})
    t.join(30)
    assert not t.is_alive()
    assert "".join(chunks) == "start\nmore\n"


def test_log_of_missing_pod_is_404(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod_log("ghost", "default")
    assert err.value.status == 404


def test_binding_sets_node(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("p"))
    binding = client.V1Binding(metadata=client.V1ObjectMeta(name="p"),
                               target=client.V1ObjectReference(kind="Node", name="gpu-1"))
    core.create_namespaced_binding("default", binding, _preload_content=False)
    pod = core.read_namespaced_pod("p", "default")
    assert pod.spec.node_name == "gpu-1"
    assert any(c.type == "PodScheduled" and c.status == "True" for c in pod.status.conditions)
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_binding("p", "default", binding, _preload_content=False)
    assert err.value.status == 409


def test_pod_binding_subresource(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("p"))
    binding = client.V1Binding(metadata=client.V1ObjectMeta(name="p"),
                               target=client.V1ObjectReference(kind="Node", name="gpu-2"))
    core.create_namespaced_pod_binding("p", "default", binding, _preload_content=False)
    assert core.read_namespaced_pod("p", "default").spec.node_name == "gpu-2"


def test_eviction_deletes_pod(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("p"))
    core.create_namespaced_pod_eviction("p", "default", client.V1Eviction(metadata=client.V1ObjectMeta(name="p")))
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod("p", "default")
    assert err.value.status == 404


def test_graceful_pod_deletion_when_enabled(tmp_path) -> None:
    from kubernetes import config

    from gpucaas.devtools.kube_emulator import KubeEmulator

    with KubeEmulator(pod_graceful_deletion=True) as emu:
        api = config.new_client_from_config(config_file=str(emu.write_kubeconfig(tmp_path / "kc")))
        core = client.CoreV1Api(api)
        core.create_namespaced_pod("default", pod_body("p", nodeName="gpu-1"))
        core.delete_namespaced_pod("p", "default")
        pod = core.read_namespaced_pod("p", "default")
        assert pod.metadata.deletion_timestamp is not None
        assert pod.metadata.deletion_grace_period_seconds == 30
        core.delete_namespaced_pod("p", "default", grace_period_seconds=0)  # what the kubelet does
        with pytest.raises(ApiException) as err:
            core.read_namespaced_pod("p", "default")
        assert err.value.status == 404
        api.close()


def test_write_pod_log_through_the_official_client(core: client.CoreV1Api, k8s: client.ApiClient) -> None:
    from gpucaas.devtools.kube_emulator.logs_client import write_pod_log

    core.create_namespaced_pod("default", pod_body("p"))
    write_pod_log(k8s, "default", "p", "a\n", container="main")
    write_pod_log(k8s, "default", "p", "b\n")
    assert core.read_namespaced_pod_log("p", "default") == "a\nb\n"
    write_pod_log(k8s, "default", "p", "c\n", append=False)
    assert core.read_namespaced_pod_log("p", "default") == "c\n"
    with pytest.raises(ApiException) as err:
        write_pod_log(k8s, "default", "ghost", "x")
    assert err.value.status == 404
