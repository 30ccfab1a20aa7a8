"""Authentication: the admin kubeconfig, 401s, ServiceAccount tokens (TokenRequest), SelfSubjectReview."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from gpucaas.devtools.kube_emulator import KubeEmulator
from gpucaas.devtools.kube_emulator.authn import User

KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


def sa_client(core: client.CoreV1Api, url: str, namespace: str, name: str, **spec: object) -> client.ApiClient:
    """A client that authenticates with a fresh TokenRequest token of ServiceAccount ``namespace/name``."""
    return _sa_client(core, url, namespace, name, **spec)


def _sa_client(core: client.CoreV1Api, url: str, namespace: str, name: str, **spec: object) -> client.ApiClient:
    """A client that authenticates with a fresh TokenRequest token of ServiceAccount ``namespace/name``."""
    try:
        core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    token = core.create_namespaced_service_account_token(name, namespace, {"spec": spec}).status.token
    cfg = client.Configuration()
    cfg.host = url
    cfg.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(cfg)


def kubectl(kubeconfig: Path, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [KUBECTL or "kubectl", f"--kubeconfig={kubeconfig}", *(["--token", token] if token else []), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)


def test_admin_kubeconfig_is_system_masters(k8s: client.ApiClient) -> None:
    review = client.AuthenticationV1Api(k8s).create_self_subject_review({})
    assert review.status.user_info.username == "kubernetes-admin"
    assert set(review.status.user_info.groups) == {"system:masters", "system:authenticated"}


@pytest.mark.parametrize("header", [None, "Bearer not-a-token", "Basic dXNlcjpwdw=="])
def test_missing_or_bad_token_is_401_status(kube_emulator, header: str | None) -> None:
    http = urllib3.PoolManager()
    r = http.request("GET", f"{kube_emulator.url}/api/v1/namespaces", headers={"Authorization": header} if header else {})
    assert r.status == 401
    assert json.loads(r.data) == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                  "message": "Unauthorized", "reason": "Unauthorized", "code": 401}


def test_anonymous_may_read_version_but_nothing_else() -> None:
    with KubeEmulator(anonymous_auth=True) as emu:
        http = urllib3.PoolManager()
        assert http.request("GET", f"{emu.url}/version").status == 200
        r = http.request("GET", f"{emu.url}/api/v1/namespaces/default/pods")
        assert r.status == 403
        assert json.loads(r.data)["message"] == (
            'pods is forbidden: User "system:anonymous" cannot list resource "pods" in API group "" '
            'in the namespace "default"')


def test_service_account_token_identity_and_groups(kube_emulator, core: client.CoreV1Api) -> None:
    with sa_client(core, kube_emulator.url, "default", "robot") as api:
        info = client.AuthenticationV1Api(api).create_self_subject_review({}).status.user_info
    sa = core.read_namespaced_service_account("robot", "default")
    assert info.username == "system:serviceaccount:default:robot"
    assert info.uid == sa.metadata.uid
    assert info.groups == ["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"]


def test_token_request_answers_like_the_server(kube_emulator, core: client.CoreV1Api) -> None:
    core.create_namespaced_service_account("default", {"metadata": {"name": "robot"}})
    tr = core.create_namespaced_service_account_token("robot", "default", {"spec": {"expirationSeconds": 7200}})
    assert tr.spec.expiration_seconds == 7200 and tr.status.token.count(".") == 2
    with pytest.raises(ApiException) as err:
        core.create_namespaced_service_account_token("robot", "default", {"spec": {"expirationSeconds": 60}})
    assert err.value.status == 422 and "may not specify a duration less than 10 minutes" in err.value.body
    with pytest.raises(ApiException) as err:
        core.create_namespaced_service_account_token("ghost", "default", {"spec": {}})
    assert err.value.status == 404 and json.loads(err.value.body)["message"] == 'serviceaccounts "ghost" not found'


def test_token_dies_with_its_service_account(kube_emulator, core: client.CoreV1Api) -> None:
    with sa_client(core, kube_emulator.url, "default", "robot") as api:
        auth = client.AuthenticationV1Api(api)
        auth.create_self_subject_review({})
        core.delete_namespaced_service_account("robot", "default")
        core.create_namespaced_service_account("default", {"metadata": {"name": "robot"}})  # same name, new uid
        with pytest.raises(ApiException) as err:
            auth.create_self_subject_review({})
        assert err.value.status == 401


def test_tokens_survive_a_restart_with_persistence(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    with KubeEmulator(persist_path=state) as emu:
        kc = emu.write_kubeconfig(tmp_path / "kc")
        admin = emu.admin_token
        with config.new_client_from_config(str(kc)) as api:
            core = client.CoreV1Api(api)
            core.create_namespaced_service_account("default", {"metadata": {"name": "robot"}})
            token = core.create_namespaced_service_account_token("robot", "default", {"spec": {}}).status.token
    with KubeEmulator(persist_path=state) as emu:
        assert emu.admin_token == admin
        http = urllib3.PoolManager()
        r = http.request("POST", f"{emu.url}/apis/authentication.k8s.io/v1/selfsubjectreviews", body=b"{}",
                         headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        assert r.status == 201
        assert json.loads(r.data)["status"]["userInfo"]["username"] == "system:serviceaccount:default:robot"


def test_static_token_file(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.csv"
    tokens.write_text('node-token,system:node:gpu-a,uid-1,"system:nodes"\n')
    with KubeEmulator(token_auth_file=tokens) as emu:
        emu.add_token("sched-token", User("system:kube-scheduler"))
        cfg = client.Configuration()
        cfg.host = emu.url
        for token, name, groups in (("node-token", "system:node:gpu-a", ["system:nodes", "system:authenticated"]),
                                    ("sched-token", "system:kube-scheduler", ["system:authenticated"])):
            cfg.api_key = {"authorization": f"Bearer {token}"}
            with client.ApiClient(cfg) as api:
                info = client.AuthenticationV1Api(api).create_self_subject_review({}).status.user_info
            assert (info.username, info.groups) == (name, groups)


@needs_kubectl
def test_kubectl_create_token_and_auth_whoami(kubeconfig: Path, core: client.CoreV1Api) -> None:
    core.create_namespaced_service_account("default", {"metadata": {"name": "robot"}})
    made = kubectl(kubeconfig, "create", "token", "robot", "--duration=20m")
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    who = kubectl(kubeconfig, "auth", "whoami", "-o", "json", token=token)
    assert who.returncode == 0, who.stderr
    info = json.loads(who.stdout)["status"]["userInfo"]
    assert info["username"] == "system:serviceaccount:default:robot"
    admin = kubectl(kubeconfig, "auth", "whoami")
    assert admin.returncode == 0 and "kubernetes-admin" in admin.stdout and "system:masters" in admin.stdout
    bad = kubectl(kubeconfig, "get", "pods", token="wrong")
    assert bad.returncode != 0 and "You must be logged in to the server" in bad.stderr


@pytest.mark.parametrize("body", [b"[1]", b'{"spec": "x"}', b'{"spec": {"resourceAttributes": "x"}}', b"not json"])
def test_malformed_review_bodies_are_400(kube_emulator, body: bytes) -> None:
    http = urllib3.PoolManager()
    for path in ("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                 "/apis/authentication.k8s.io/v1/selfsubjectreviews"):
        r = http.request("POST", kube_emulator.url + path, body=body,
                         headers={"Authorization": f"Bearer {kube_emulator.admin_token}",
                                  "Content-Type": "application/json"})
        assert r.status == 400, (path, r.data)
