"""Container endpoints: declared ports become a Service, Ingresses and a CiliumNetworkPolicy
owned by the pod, listed on the container as URLs while it is active, removed when it ends;
``/v1/endpoint-auth`` (the ingress controller's question) admits only tokens of the
container's tenancy, for a running container and a declared port, and answers everything
else as for an endpoint that does not exist.

Traffic through a real ingress controller to a real container: ``tests/e2e/test_endpoints.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as kc
from kubernetes.client.exceptions import ApiException

from devtools.waiting import wait_for
from tests.api.conftest import new_tenancy
from tests.api.harness import ApiServer
from tests.api.kube_helpers import RUNNING, SUCCEEDED, get_pod, mark_tenancy_ready, set_pod_status

DOMAIN = "apps.example.test"
AUTH = {"example.test/auth": "ask-the-api"}


@pytest.fixture
def api(kubeconfig: Path, serve: Callable[..., ApiServer], database_url: str) -> ApiServer:
    return serve(
        database_url, kubeconfig, endpoint_domain=DOMAIN, endpoint_auth_annotations=AUTH, endpoint_ingress_class="edge"
    )


def _tenant(api: ApiServer, k8s: Any, name: str) -> str:
    with api.client() as admin:
        token = new_tenancy(admin, name)
    mark_tenancy_ready(k8s, name)
    return token


def _read(k8s: Any, kind: str, ns: str, name: str) -> dict[str, Any] | None:
    try:
        if kind == "Service":
            return k8s.sanitize_for_serialization(kc.CoreV1Api(k8s).read_namespaced_service(name, ns))
        if kind == "Ingress":
            return k8s.sanitize_for_serialization(kc.NetworkingV1Api(k8s).read_namespaced_ingress(name, ns))
        return kc.CustomObjectsApi(k8s).get_namespaced_custom_object(
            "cilium.io", "v2", ns, "ciliumnetworkpolicies", name
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _asked(api: ApiServer, token: str | None, host: str) -> tuple[int, dict[str, Any] | None]:
    """What the API answers the ingress controller for a request with ``token`` sent to ``host``."""
    with api.client(token) as c:
        r = c.get("/v1/endpoint-auth", headers={"X-Forwarded-Host": host, "X-Forwarded-Uri": "/"})
    return r.status_code, (r.json() if r.content else None)


@pytest.mark.parametrize(
    ("ports", "words"),
    [
        ([{"port": 0}], "greater than or equal to 1"),
        ([{"port": 65536}], "less than or equal to 65535"),
        ([{"port": "8080"}], "valid integer"),
        ([{"port": 8080, "public": "yes"}], "valid boolean"),
        ([{"port": 8080}, {"port": 8080, "public": True}], "port 8080 is given twice"),
        ([{"port": 8000 + i} for i in range(9)], "at most 8 items"),
        ([{"port": 8080, "protocol": "udp"}], "unknown field(s) 'protocol'"),
        ([{}], "field required"),
    ],
    ids=["zero", "too-high", "string", "public-not-bool", "twice", "nine", "unknown-field", "no-port"],
)
def test_bad_ports_are_refused_naming_the_field(api: ApiServer, k8s: Any, ports: list[Any], words: str) -> None:
    token = _tenant(api, k8s, "badports")
    with api.client(token) as c:
        r = c.post("/v1/containers", json={"image": "busybox", "ports": ports})
        assert r.status_code == 422, r.text
        assert "ports" in r.json()["detail"] and words in r.json()["detail"], r.json()["detail"]
        assert c.get("/v1/containers").json()["count"] == 0


def test_ports_become_endpoints_served_while_the_container_runs(api: ApiServer, k8s: Any) -> None:
    token = _tenant(api, k8s, "serves")
    ns = "tenant-serves"
    with api.client(token) as c:
        r = c.post(
            "/v1/containers", json={"image": "busybox", "ports": [{"port": 8080}, {"port": 6006, "public": True}]}
        )
        assert r.status_code == 202, r.text
        cid = r.json()["id"]
        assert r.json()["ports"] == [{"port": 8080, "public": False}, {"port": 6006, "public": True}]
        assert r.json()["endpoints"] == [
            {"port": 8080, "url": f"https://{cid}-8080.{DOMAIN}", "public": False},
            {"port": 6006, "url": f"https://{cid}-6006.{DOMAIN}", "public": True},
        ]
        pod = wait_for(lambda: get_pod(k8s, ns, f"gpucaas-{cid}"), 60, what="the pod")
        owner = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": f"gpucaas-{cid}",
            "uid": pod["metadata"]["uid"],
            "blockOwnerDeletion": False,
        }

        svc = wait_for(lambda: _read(k8s, "Service", ns, f"gpucaas-{cid}"), 60, what="the Service")
        assert svc["spec"]["selector"] == {"gpucaas.dev/container-id": cid}
        assert [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(8080, 8080), (6006, 6006)]
        assert svc["metadata"]["ownerReferences"] == [owner]
        private = wait_for(lambda: _read(k8s, "Ingress", ns, f"gpucaas-{cid}-private"), 60, what="private Ingress")
        public = wait_for(lambda: _read(k8s, "Ingress", ns, f"gpucaas-{cid}-public"), 60, what="public Ingress")
        assert private["spec"]["ingressClassName"] == public["spec"]["ingressClassName"] == "edge"
        assert [r["host"] for r in private["spec"]["rules"]] == [f"{cid}-8080.{DOMAIN}"]
        assert private["spec"]["tls"] == [{"hosts": [f"{cid}-8080.{DOMAIN}"]}]  # the controller's default cert
        assert private["spec"]["rules"][0]["http"]["paths"][0]["backend"] == {
            "service": {"name": f"gpucaas-{cid}", "port": {"number": 8080}}
        }
        assert private["metadata"]["annotations"]["example.test/auth"] == "ask-the-api"
        assert [r["host"] for r in public["spec"]["rules"]] == [f"{cid}-6006.{DOMAIN}"]
        assert "example.test/auth" not in (public["metadata"].get("annotations") or {})
        assert private["metadata"]["ownerReferences"] == public["metadata"]["ownerReferences"] == [owner]
        policy = wait_for(lambda: _read(k8s, "CiliumNetworkPolicy", ns, f"gpucaas-{cid}-endpoints"), 60)
        assert policy["spec"]["endpointSelector"] == {"matchLabels": {"gpucaas.dev/container-id": cid}}
        (rule,) = policy["spec"]["ingress"]
        assert rule["fromEndpoints"] == [
            {"matchLabels": {"k8s:io.kubernetes.pod.namespace": "traefik", "k8s:app.kubernetes.io/name": "traefik"}}
        ]
        assert rule["toPorts"] == [
            {"ports": [{"port": "8080", "protocol": "TCP"}, {"port": "6006", "protocol": "TCP"}]}
        ]

        set_pod_status(k8s, ns, f"gpucaas-{cid}", RUNNING)
        wait_for(lambda: c.get(f"/v1/containers/{cid}").json()["status"] == "Running", 60)
        assert c.get("/v1/containers").json()["data"][0]["endpoints"][0]["url"] == f"https://{cid}-8080.{DOMAIN}"

        set_pod_status(k8s, ns, f"gpucaas-{cid}", SUCCEEDED)
        wait_for(lambda: c.get(f"/v1/containers/{cid}").json()["status"] == "Succeeded", 60)
        assert c.get(f"/v1/containers/{cid}").json()["endpoints"] == []
        for kind, name in [
            ("Ingress", f"gpucaas-{cid}-private"),
            ("Ingress", f"gpucaas-{cid}-public"),
            ("Service", f"gpucaas-{cid}"),
            ("CiliumNetworkPolicy", f"gpucaas-{cid}-endpoints"),
        ]:
            wait_for(lambda k=kind, n=name: _read(k8s, k, ns, n) is None, 60, what=f"{kind} {name} removed")
        assert get_pod(k8s, ns, f"gpucaas-{cid}") is not None  # the finished pod stays, for its log


def test_only_the_containers_tenancy_gets_through_a_private_endpoint(api: ApiServer, k8s: Any) -> None:
    token = _tenant(api, k8s, "owns")
    stranger = _tenant(api, k8s, "peeks")
    ns = "tenant-owns"
    with api.client(token) as c:
        cid = c.post("/v1/containers", json={"image": "busybox", "ports": [{"port": 8080}]}).json()["id"]
        reader = c.post("/v1/tokens", json={"name": "dashboard", "scope": "read"}).json()["token"]
        host = f"{cid}-8080.{DOMAIN}"
        pod = f"gpucaas-{cid}"
        wait_for(lambda: get_pod(k8s, ns, pod), 60, what="the pod")
        # not running yet: as if there were no endpoint
        status, body = _asked(api, token, host)
        assert status == 404 and body == {"code": "not_found", "detail": f"no endpoint at {host!r}"}
        set_pod_status(k8s, ns, pod, RUNNING)
        wait_for(lambda: c.get(f"/v1/containers/{cid}").json()["status"] == "Running", 60)

    assert _asked(api, token, host) == (204, None)
    assert _asked(api, reader, host) == (204, None)  # any scope of the tenancy: it is the tenant's own service
    assert _asked(api, token, host.upper() + ":443") == (204, None)
    missing = f"{'0' * 20}-8080.{DOMAIN}"
    for who, asked in [("no token", None), ("a made-up token", "gca_not-a-token")]:
        status, body = _asked(api, asked, host)
        assert status == 401 and body is not None and body["code"] == "unauthorized", who
    # another tenancy's token: the same answer as for a container that does not exist
    for other_host in (host, missing, f"{cid}-9090.{DOMAIN}", f"{cid}-8080.elsewhere.test", "localhost"):
        theirs, absent = _asked(api, stranger, other_host), _asked(api, stranger, missing)
        assert theirs[0] == absent[0] == 404
        assert theirs[1] == {"code": "not_found", "detail": f"no endpoint at {other_host!r}"}
    assert _asked(api, token, f"{cid}-9090.{DOMAIN}")[0] == 404  # a port it did not declare
    assert _asked(api, None, host)[0] == 401
    with api.client() as admin:  # the operator's token is no tenant's
        assert admin.get("/v1/endpoint-auth", headers={"X-Forwarded-Host": host}).status_code == 404

    with api.client(token) as c:
        assert c.delete(f"/v1/containers/{cid}").status_code == 200
        assert c.get(f"/v1/containers/{cid}").json()["endpoints"] == []
    assert _asked(api, token, host)[0] == 404
    wait_for(lambda: _read(k8s, "Ingress", ns, f"gpucaas-{cid}-private") is None, 60, what="the Ingress removed")


def test_an_ingress_controller_outside_the_pod_network_is_admitted_by_its_addresses_only(
    kubeconfig: Path, serve: Callable[..., ApiServer], database_url: str, k8s: Any
) -> None:
    """``GPUCAAS_ENDPOINT_INGRESS_CIDRS``: a controller that is no pod (the sandbox's Traefik on the
    machine, a load balancer) reaches the declared ports from those addresses, beside the pods."""
    api = serve(database_url, kubeconfig, endpoint_domain=DOMAIN, endpoint_ingress_cidrs=["10.89.0.1/32"])
    token = _tenant(api, k8s, "outside")
    with api.client(token) as c:
        cid = c.post("/v1/containers", json={"image": "busybox", "ports": [{"port": 8080}]}).json()["id"]
    policy = wait_for(lambda: _read(k8s, "CiliumNetworkPolicy", "tenant-outside", f"gpucaas-{cid}-endpoints"), 60)
    ports = [{"ports": [{"port": "8080", "protocol": "TCP"}]}]
    pods, addresses = policy["spec"]["ingress"]
    assert pods["toPorts"] == addresses["toPorts"] == ports
    assert addresses == {"fromCIDR": ["10.89.0.1/32"], "toPorts": ports}


def test_a_bad_ingress_cidr_stops_the_start_naming_the_setting(
    make_settings: Callable[..., Any], kubeconfig: Path, database_url: str
) -> None:
    with pytest.raises(ValueError, match="endpoint_ingress_cidrs"):
        make_settings(database_url, kubeconfig, endpoint_ingress_cidrs=["10.89.0.1/33"])
