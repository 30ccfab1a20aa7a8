"""The core Kubernetes adapter: configuration, timeouts, retries and the one error tree.

Against the local cluster (real HTTP, the official client) and, for what a healthy API server
cannot be made to answer (403 bodies, 503 then 200, a server that never answers),
against a small HTTP server in the test that answers exactly as the Kubernetes API
server documents (``metav1.Status`` bodies, see core/kube/errors.py).
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from core import crds, kube as k
from tests.core_kube.scripted import FORBIDDEN_STATUS


def no_wait_retry(attempts: int = 3) -> k.RetryPolicy:
    return k.RetryPolicy(attempts=attempts, initial_s=0.0, max_s=0.0)


# --- errors against the local cluster -------------------------------------------------------------


def test_definite_answers_become_named_errors_chained_to_the_client_error(kubeconfig: Path) -> None:
    import kubernetes

    with k.Kube(k.KubeConnection(kubeconfig=kubeconfig)) as kube:
        with pytest.raises(k.NotFound) as missing:
            kube.call(kube.core.read_namespace, "no-such-namespace")
        assert missing.value.status == 404
        assert isinstance(missing.value.__cause__, kubernetes.client.ApiException)

        body = {"apiVersion": crds.API_VERSION, "kind": "Tenancy", "metadata": {"name": "t1"}}
        kube.call(kube.custom.create_cluster_custom_object, crds.GROUP, crds.VERSION, crds.TENANCY_PLURAL, body)
        with pytest.raises(k.Conflict):
            kube.call(kube.custom.create_cluster_custom_object, crds.GROUP, crds.VERSION, crds.TENANCY_PLURAL, body)

        bad = {**body, "metadata": {"name": "t2"}, "spec": {"gpuQuota": -3}}
        with pytest.raises(k.Invalid) as invalid:
            kube.call(kube.custom.create_cluster_custom_object, crds.GROUP, crds.VERSION, crds.TENANCY_PLURAL, bad)
        assert invalid.value.status == 422
        assert "gpuQuota" in str(invalid.value)


def test_raw_requests_share_the_error_tree(kubeconfig: Path) -> None:
    with k.Kube(k.KubeConnection(kubeconfig=kubeconfig)) as kube:
        assert kube.request("GET", "/api/v1/namespaces")["kind"] == "NamespaceList"
        with pytest.raises(k.NotFound):
            kube.request("GET", "/api/v1/namespaces/nope")


# --- 403, 5xx and no answer -------------------------------------------------------------------


def test_forbidden_names_user_verb_and_resource(scripted) -> None:
    srv = scripted([(403, FORBIDDEN_STATUS)])
    with k.Kube(k.KubeConnection(server=srv.url, token="t0k3n"), retry=no_wait_retry()) as kube:
        with pytest.raises(k.Forbidden) as info:
            kube.call(kube.core.list_namespace, idempotent=True)
    err = info.value
    assert (err.user, err.verb, err.resource, err.group) == (
        "system:serviceaccount:gpucaas-system:gpucaas-api",
        "list",
        "namespaces",
        None,
    )
    assert err.summary() == "forbidden: system:serviceaccount:gpucaas-system:gpucaas-api cannot list namespaces"
    assert len(srv.requests) == 1  # a 403 is an answer: never retried


def test_forbidden_in_a_namespace_and_group() -> None:
    err = k.from_status(
        403,
        {
            "message": 'pods "p" is forbidden: User "alice" cannot create resource "pods/binding"'
            ' in API group "" in the namespace "tenant-a"'
        },
    )
    assert isinstance(err, k.Forbidden)
    assert err.summary() == "forbidden: alice cannot create pods/binding in namespace tenant-a"
    err = k.from_status(
        403,
        {
            "message": 'clusterkopfpeerings.kopf.dev is forbidden: User "bob" cannot create '
            'resource "clusterkopfpeerings" in API group "kopf.dev" at the cluster scope'
        },
    )
    assert err.summary() == "forbidden: bob cannot create clusterkopfpeerings.kopf.dev"
    # an admission refusal is a 403 too, but no RBAC denial
    psa = k.from_status(403, {"message": 'pods "p" is forbidden: violates PodSecurity "restricted:latest": ...'})
    assert isinstance(psa, k.Forbidden) and not psa.is_rbac


def test_invalid_carries_the_causes() -> None:
    err = k.from_status(
        422,
        {
            "kind": "Status",
            "reason": "Invalid",
            "message": 'Pod "p" is invalid: ...',
            "details": {
                "causes": [{"reason": "FieldValueRequired", "field": "spec.containers", "message": "Required value"}]
            },
        },
    )
    assert isinstance(err, k.Invalid)
    assert [str(c) for c in err.causes] == ["spec.containers: Required value"]


def test_5xx_is_retried_when_idempotent_and_then_succeeds(scripted) -> None:
    outage = {"kind": "Status", "code": 503, "message": "etcd leader changed"}
    srv = scripted([(503, outage), (503, outage), (200, {"kind": "NamespaceList", "items": []})])
    with k.Kube(k.KubeConnection(server=srv.url), retry=no_wait_retry(3)) as kube:
        assert kube.json(kube.core.list_namespace, idempotent=True)["kind"] == "NamespaceList"
    assert len(srv.requests) == 3


def test_non_idempotent_calls_are_not_retried(scripted) -> None:
    srv = scripted([(503, {"kind": "Status", "code": 503, "message": "down"}), (201, {})])
    with k.Kube(k.KubeConnection(server=srv.url), retry=no_wait_retry(3)) as kube:
        with pytest.raises(k.Unavailable) as info:
            kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "x"}})
    assert len(srv.requests) == 1
    assert info.value.status == 503
    assert info.value.summary().startswith(f"Kubernetes unavailable at {srv.url}")


def test_retries_are_bounded(scripted) -> None:
    srv = scripted([(429, {"kind": "Status", "code": 429, "message": "too many requests"})])
    with k.Kube(k.KubeConnection(server=srv.url), retry=no_wait_retry(4)) as kube:
        with pytest.raises(k.Unavailable):
            kube.request("GET", "/api/v1/namespaces")
    assert len(srv.requests) == 4


def test_unreachable_names_the_server() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with k.Kube(k.KubeConnection(server=url), retry=no_wait_retry(2)) as kube:
        with pytest.raises(k.Unavailable) as info:
            kube.call(kube.core.list_namespace, idempotent=True)
    assert info.value.status is None
    assert info.value.summary().startswith(f"Kubernetes unreachable at {url}")
    assert info.value.__cause__ is not None


def test_read_timeout_is_unavailable() -> None:
    with socket.socket() as listener:  # accepts, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        conn = k.KubeConnection(server=url, connect_timeout_s=1.0, read_timeout_s=0.2)
        with k.Kube(conn, retry=k.NO_RETRY) as kube:
            with pytest.raises(k.Unavailable, match="(?i)timed out|timeout"):
                kube.request("GET", "/api/v1/namespaces")


# --- configuration ----------------------------------------------------------------------------


def test_explicit_server_token_and_ca(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    ca = tmp_path / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    cfg = k.load_configuration(k.KubeConnection(server="https://10.0.0.1:6443/", token_file=token, ca_file=ca))
    assert cfg.host == "https://10.0.0.1:6443"
    assert cfg.get_api_key_with_prefix("BearerToken") == "Bearer s3cret"
    assert cfg.ssl_ca_cert == str(ca) and cfg.verify_ssl
    assert cfg.retries is False  # urllib3 never retries behind the policy's back
    info = k.kopf_connection_info(cfg)
    assert (info.server, info.token, info.scheme, info.ca_path) == (
        "https://10.0.0.1:6443",
        "s3cret",
        "Bearer",
        str(ca),
    )


def test_kubeconfig_and_missing_configuration(kubeconfig: Path, tmp_path: Path) -> None:
    cfg = k.load_configuration(k.KubeConnection(kubeconfig=kubeconfig))
    assert cfg.host.startswith("http")
    with pytest.raises(k.Unavailable, match="no usable Kubernetes configuration"):
        k.load_configuration(k.KubeConnection(kubeconfig=tmp_path / "missing"))


def test_retry_policy_delays_grow_and_are_capped() -> None:
    assert k.RetryPolicy(attempts=5, initial_s=0.5, max_s=2.0, factor=2.0).delays() == [0.5, 1.0, 2.0, 2.0]
    assert k.NO_RETRY.delays() == []


def test_kopf_client_errors_translate_alike() -> None:
    from kopf._cogs.clients.errors import APIForbiddenError

    exc = APIForbiddenError(FORBIDDEN_STATUS, status=403, headers={})
    err = k.from_kopf_error(exc, server="https://k8s:6443")
    assert isinstance(err, k.Forbidden) and err.verb == "list" and err.resource == "namespaces"
    lost = k.from_kopf_error(ConnectionRefusedError("refused"), server="https://k8s:6443")
    assert isinstance(lost, k.Unavailable) and lost.summary().startswith("Kubernetes unreachable at https://k8s:6443")
