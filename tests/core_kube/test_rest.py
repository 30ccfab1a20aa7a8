"""The light path (``RestKube``): the same calls, errors and retries as ``Kube`` without the
official client, against the local cluster's kube-apiserver over HTTPS with a kubeconfig (client certificate or
token, and CA) and, for answers a healthy API server does not give, the scripted server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from core import crds, kube as k
from core.lease_store import LeaseConflict, LeaseStore, build_gpu_lease, lease_name
from tests.core_kube.scripted import FORBIDDEN_STATUS


def no_wait_retry(attempts: int = 3) -> k.RetryPolicy:
    return k.RetryPolicy(attempts=attempts, initial_s=0.0, max_s=0.0)


def test_importing_the_light_path_does_not_load_the_official_client() -> None:
    code = (
        "import sys; import core.kube, core.lease_store, services.gpu_leases.agent, "
        "services.fabric.publisher; print('kubernetes' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_custom_objects_round_trip_over_tls(kubeconfig: Path) -> None:
    with k.RestKube(k.KubeConnection(kubeconfig=kubeconfig)) as kube:
        assert kube.server.startswith("https://")
        store = LeaseStore(kube)
        lease = store.ensure(build_gpu_lease("node-r", "0000:18:00.0", "0x2330", 2, "H100"))
        assert lease["status"]["state"] == "Free"
        name = lease_name("node-r", "0000:18:00.0")
        assert [x["metadata"]["name"] for x in store.list("node-r")] == [name]
        assert store.list("other-node") == []
        assert (
            store.ensure(build_gpu_lease("node-r", "0000:18:00.0", "0x2330", 2, "H100"))["metadata"]["uid"]
            == lease["metadata"]["uid"]
        )  # a second create answers 409: the live object
        stale = dict(lease)
        store.write_status(lease, {**lease["status"], "reason": "checked"})
        with pytest.raises(LeaseConflict):  # guarded by resourceVersion
            store.write_status(stale, {**lease["status"], "reason": "stale"})
        patched = kube.call(
            kube.custom.patch_cluster_custom_object_status,
            crds.GROUP,
            crds.VERSION,
            crds.GPULEASE_PLURAL,
            name,
            {"status": {"message": "merge-patched"}},
        )
        assert patched["status"]["message"] == "merge-patched"
        assert patched["status"]["reason"] == "checked"  # a merge patch keeps the rest


def test_raw_requests_and_the_error_tree(kubeconfig: Path) -> None:
    with k.RestKube(k.KubeConnection(kubeconfig=kubeconfig)) as kube:
        assert kube.request("GET", "/api/v1/namespaces")["kind"] == "NamespaceList"
        with pytest.raises(k.NotFound) as missing:
            kube.request("GET", "/api/v1/namespaces/default/pods/nope")
        assert missing.value.status == 404
        body = {"apiVersion": crds.API_VERSION, "kind": "Tenancy", "metadata": {"name": "t-light"}}
        kube.call(kube.custom.create_cluster_custom_object, crds.GROUP, crds.VERSION, crds.TENANCY_PLURAL, body)
        with pytest.raises(k.Conflict):
            kube.call(kube.custom.create_cluster_custom_object, crds.GROUP, crds.VERSION, crds.TENANCY_PLURAL, body)
        bad = {**body, "metadata": {"name": "t-bad"}, "spec": {"gpuQuota": -3}}
        with pytest.raises(k.Invalid, match="gpuQuota"):
            kube.call(kube.custom.create_cluster_custom_object, crds.GROUP, crds.VERSION, crds.TENANCY_PLURAL, bad)


def test_a_wrong_token_is_unauthorized(local_cluster, tmp_path: Path) -> None:
    cfg = local_cluster.token_kubeconfig(tmp_path / "kc", "nobody", "not-a-token")
    with k.RestKube(k.KubeConnection(kubeconfig=cfg)) as kube, pytest.raises(k.Unauthorized):
        kube.request("GET", "/api/v1/namespaces")


def test_forbidden_and_retries_as_the_full_adapter(scripted) -> None:
    srv = scripted([(403, FORBIDDEN_STATUS)])
    with k.RestKube(k.KubeConnection(server=srv.url, token="t0k3n"), retry=no_wait_retry()) as kube:
        with pytest.raises(k.Forbidden) as info:
            kube.request("GET", "/api/v1/namespaces")
    assert info.value.verb == "list" and len(srv.requests) == 1
    outage = {"kind": "Status", "code": 503, "message": "etcd leader changed"}
    srv = scripted([(503, outage), (503, outage), (200, {"kind": "NamespaceList", "items": []})])
    with k.RestKube(k.KubeConnection(server=srv.url), retry=no_wait_retry(3)) as kube:
        assert kube.request("GET", "/api/v1/namespaces")["kind"] == "NamespaceList"
    assert len(srv.requests) == 3


def test_credential_plugins_fall_back_to_the_official_client(tmp_path: Path) -> None:
    cfg = tmp_path / "kc"
    cfg.write_text("""apiVersion: v1
kind: Config
current-context: c
clusters: [{name: k, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/false}}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
""")
    with pytest.raises(k.Unavailable, match="credential plugin"):
        k.RestKube(k.KubeConnection(kubeconfig=cfg))
    assert isinstance(k.connect(k.KubeConnection(kubeconfig=cfg)), k.Kube)


def test_no_configuration_is_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    with pytest.raises(k.Unavailable, match="no usable Kubernetes configuration"):
        k.RestKube()
