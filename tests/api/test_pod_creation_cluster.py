"""The API's pod creation, on the local cluster or (``KUBECONFIG`` set) on a real cluster.

Admission is the point on a real cluster: the tenant namespace is labelled as the
tenancy controller labels it (Pod Security ``restricted`` enforced), the RuntimeClass
exists as the chart creates it, and the pod the API builds must be admitted. No
test-only hooks are used; everything created carries a unique name and is removed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from core import crds
from core.kube import Conflict, Kube, NotFound
from devtools.waiting import wait_for
from tests.api.harness import ApiServer
from tests.api.kube_helpers import bind_pod, get_pod, set_pod_status

RUNTIME_CLASS = "kata-qemu-nvidia-gpu"
PSA_RESTRICTED = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn", "audit")}


def _ensure_runtime_class(kube: Kube) -> None:
    body = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": RUNTIME_CLASS},
        "handler": RUNTIME_CLASS,
    }
    try:
        kube.request("POST", "/apis/node.k8s.io/v1/runtimeclasses", body=body)
    except Conflict:
        pass


@pytest.mark.cluster
def test_the_api_creates_an_admissible_restricted_pod(
    kubeconfig: Path,
    k8s: Any,
    serve: Callable[..., ApiServer],
    database_url: str,
    unique_name: Callable[[str], str],
) -> None:
    kube = Kube.of(k8s)
    tenancy = unique_name("podtest")
    namespace = crds.tenant_namespace(tenancy)
    _ensure_runtime_class(kube)
    api = serve(database_url, kubeconfig)
    try:
        # the tenancy controller's part, as it does it: the labelled namespace, then Ready
        token = _tenancy_and_namespace(kube, api, tenancy, gpu_quota=1)
        _mark_ready(kube, tenancy)
        with api.client(token) as tenant:
            cid = tenant.post(
                "/v1/containers", json={"container-url": "busybox:1.36", "tenancy": tenancy, "command": ["sleep", "1"]}
            ).json()["id"]
            pod = wait_for(lambda: get_pod(k8s, namespace, f"gpucaas-{cid}"), 60, what="the API's pod")
            status = tenant.get(f"/v1/containers/{cid}").json()
        assert status["status"] in ("Pending", "Running", "Succeeded"), status  # admitted, not Failed
        spec = pod["spec"]
        assert spec["runtimeClassName"] == RUNTIME_CLASS
        assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] > 0
        assert spec["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    finally:
        _remove_tenancy(kube, tenancy)


def _tenancy(kube: Kube, name: str) -> dict[str, Any] | None:
    try:
        return kube.call(kube.custom.get_cluster_custom_object, crds.GROUP, crds.VERSION, crds.TENANCY_PLURAL, name)
    except NotFound:
        return None


def _tenancy_and_namespace(kube: Kube, api: ApiServer, tenancy: str, *, gpu_quota: int) -> str:
    """The tenancy made through the admin API, and its labelled namespace (the tenancy
    controller's first part, Pod Security restricted); a tenant token of it."""
    with api.client() as admin:
        assert admin.post("/v1/admin/tenancies", json={"name": tenancy, "gpu_quota": gpu_quota}).status_code == 201
        token = str(admin.post(f"/v1/admin/tenancies/{tenancy}/tokens").json()["token"])
    labels = {crds.LABEL_TENANCY: tenancy, **PSA_RESTRICTED}
    kube.call(kube.core.create_namespace, {"metadata": {"name": crds.tenant_namespace(tenancy), "labels": labels}})
    return token


def _mark_ready(kube: Kube, tenancy: str) -> None:
    """The tenancy controller's last part: once the API has upserted the Tenancy, its status Ready."""
    wait_for(lambda: _tenancy(kube, tenancy), 60, what="tenancy upserted by the API")
    kube.call(
        kube.custom.patch_cluster_custom_object_status,
        crds.GROUP,
        crds.VERSION,
        crds.TENANCY_PLURAL,
        tenancy,
        {"status": {"phase": "Ready", "namespace": crds.tenant_namespace(tenancy), "observedGeneration": 1}},
    )


def _ready_dra_tenancy(kube: Kube, api: ApiServer, tenancy: str, gpus: int) -> str:
    """The tenancy made through the API, and the tenancy controller's part in dra mode (the
    labelled namespace, the claim template of ``gpus``, the Tenancy Ready); its tenant token."""
    from core import dra

    namespace = crds.tenant_namespace(tenancy)
    token = _tenancy_and_namespace(kube, api, tenancy, gpu_quota=8)
    template = dra.claim_template(gpus, namespace)
    kube.call(
        kube.custom.create_namespaced_custom_object,
        "resource.k8s.io",
        "v1",
        namespace,
        "resourceclaimtemplates",
        template,
    )
    _mark_ready(kube, tenancy)
    return token


def _remove_tenancy(kube: Kube, tenancy: str) -> None:
    try:
        kube.call(kube.core.delete_namespace, crds.tenant_namespace(tenancy))
    except NotFound:
        pass
    try:
        kube.call(kube.custom.delete_cluster_custom_object, crds.GROUP, crds.VERSION, crds.TENANCY_PLURAL, tenancy)
    except NotFound:
        pass


@pytest.fixture
def dra_tenancy(
    kubeconfig: Path,
    k8s: Any,
    serve: Callable[..., ApiServer],
    database_url: str,
    unique_name: Callable[[str], str],
) -> Iterator[tuple[Kube, ApiServer, str, str]]:
    """An API in the dra mode and a Ready tenancy of its own with the 2-GPU claim template:
    ``(kube, api, tenancy, tenant token)``; the tenancy removed afterwards."""
    kube = Kube.of(k8s)
    tenancy = unique_name("dratest")
    _ensure_runtime_class(kube)
    api = serve(database_url, kubeconfig, allocation_mode="dra")
    try:
        yield kube, api, tenancy, _ready_dra_tenancy(kube, api, tenancy, 2)
    finally:
        _remove_tenancy(kube, tenancy)


def _submit_two_gpus(tenant: httpx.Client, tenancy: str) -> str:
    r = tenant.post(
        "/v1/containers",
        json={"container-url": "busybox:1.36", "tenancy": tenancy, "gpus": 2, "command": ["sleep", "1"]},
    )
    assert r.status_code == 202, r.text
    return str(r.json()["id"])


@pytest.mark.cluster
def test_in_dra_mode_the_api_creates_a_pod_claiming_from_the_tenant_template(
    dra_tenancy: tuple[Kube, ApiServer, str, str], k8s: Any
) -> None:
    """allocation_mode dra: the pod names the namespace's template gpucaas-gpus-N and carries
    no extended resource; the API server admits it (Pod Security restricted; resource.k8s.io/v1
    served: Kubernetes 1.34+), and the API reports the GPU count it asked for."""
    _, api, tenancy, token = dra_tenancy
    with api.client(token) as tenant:
        cid = _submit_two_gpus(tenant, tenancy)
        pod = wait_for(lambda: get_pod(k8s, crds.tenant_namespace(tenancy), f"gpucaas-{cid}"), 60, what="the pod")
        status = tenant.get(f"/v1/containers/{cid}").json()
    assert status["status"] in ("Pending", "Running", "Succeeded"), status
    spec = pod["spec"]
    assert spec["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": "gpucaas-gpus-2"}]
    main = spec["containers"][0]
    assert main["resources"]["claims"] == [{"name": "gpus"}]
    assert "nvidia.com/gpu" not in main["resources"].get("limits", {})
    assert status["gpus"] == 2


def _claim_for(kube: Kube, pod: dict[str, Any], *, reserved: bool) -> None:
    """The resourceclaim controller's and kube-scheduler's parts for a dra pod: its claim made
    from the template (named in the pod's status), allocated a partition, and reserved for the
    pod, or, with ``reserved`` False, reserved for nobody."""
    from core import dra

    meta = pod["metadata"]
    namespace, name = meta["namespace"], f"{meta['name']}-gpus"
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": dra.claim_devices(2)},
    }
    made = kube.call(
        kube.custom.create_namespaced_custom_object, "resource.k8s.io", "v1", namespace, "resourceclaims", claim
    )
    made["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpus", "driver": dra.DRIVER, "pool": "gpu-node-a", "device": "nvl2-0"}]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-node-a"]}]}
                ]
            },
        },
        "reservedFor": [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}] if reserved else [],
    }
    kube.call(
        kube.custom.replace_namespaced_custom_object_status,
        "resource.k8s.io",
        "v1",
        namespace,
        "resourceclaims",
        name,
        made,
    )
    status = {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": name}]}
    kube.call(kube.core.patch_namespaced_pod_status, meta["name"], namespace, {"status": status})


@pytest.mark.cluster
def test_a_dra_pod_bound_without_its_claim_reserved_is_made_again(
    dra_tenancy: tuple[Kube, ApiServer, str, str], k8s: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """kube-scheduler reserves a pod's claim before it binds the pod; a pod bound while its claim
    names someone else or nobody (a binding and its undoing lost to a kube-apiserver restart) is
    refused by its kubelet for ever. The worker takes it for a refused attempt: the next
    attempt's pod, the refusal in its log; a pod bound with its claim reserved for it is left to
    run."""
    from services.api.domain import pods

    kube, api, tenancy, token = dra_tenancy
    namespace = crds.tenant_namespace(tenancy)
    with api.client(token) as tenant:
        cid = _submit_two_gpus(tenant, tenancy)
        first = wait_for(lambda: get_pod(k8s, namespace, pods.pod_name(cid, 0)), 60, what="the first pod")
        _claim_for(kube, first, reserved=False)
        bind_pod(k8s, namespace, first["metadata"]["name"], "gpu-node-a")
        second = wait_for(lambda: get_pod(k8s, namespace, pods.pod_name(cid, 1)), 60, what="the next attempt")
        said = [r.getMessage() for r in caplog.records if r.name == "services.api.worker"]
        assert any("the node refused the pod (ClaimNotReserved: ResourceClaim" in m for m in said), said
        wait_for(lambda: get_pod(k8s, namespace, pods.pod_name(cid, 0)) is None, 60, what="the first pod deleted")

        _claim_for(kube, second, reserved=True)
        bind_pod(k8s, namespace, second["metadata"]["name"], "gpu-node-a")
        set_pod_status(k8s, namespace, second["metadata"]["name"], {"phase": "Running"})
        running = wait_for(
            lambda: (s := tenant.get(f"/v1/containers/{cid}").json())["status"] == "Running" and s,
            60,
            what="the reserved attempt running",
        )
    assert running["pod_name"] == pods.pod_name(cid, 1), running
    assert get_pod(k8s, namespace, pods.pod_name(cid, 2)) is None


def test_only_a_bound_unstarted_pods_claim_without_it_is_a_refusal() -> None:
    """Which pods are asked about (bound, Pending, nothing started, not being deleted) and when
    their claim is a refusal (its reservedFor does not name the pod's uid)."""
    from services.api.domain import pods

    claims = {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "c-gpus"}]}
    bound = {"metadata": {"uid": "u1"}, "spec": {"nodeName": "n"}, "status": {"phase": "Pending", **claims}}
    assert pods.bound_before_start_with_claims(bound) == ["c-gpus"]
    assert pods.bound_before_start_with_claims({**bound, "spec": {}}) == []
    assert pods.bound_before_start_with_claims({**bound, "status": {**bound["status"], "phase": "Running"}}) == []
    deleting = {**bound, "metadata": {"uid": "u1", "deletionTimestamp": "2026-11-30T00:00:00Z"}}
    assert pods.bound_before_start_with_claims(deleting) == []
    started = {"containerStatuses": [{"name": "main", "restartCount": 1, "state": {"waiting": {}}}]}
    assert pods.bound_before_start_with_claims({**bound, "status": {**bound["status"], **started}}) == []
    assert pods.bound_before_start_with_claims({**bound, "status": {"phase": "Pending"}}) == []

    mine = {"metadata": {"name": "c-gpus"}, "status": {"reservedFor": [{"resource": "pods", "uid": "u1"}]}}
    other = {"metadata": {"name": "c-gpus"}, "status": {"reservedFor": [{"resource": "pods", "uid": "u2"}]}}
    assert pods.claim_not_reserved(bound, mine) is None
    assert "ResourceClaim c-gpus is not reserved" in (pods.claim_not_reserved(bound, other) or "")
    assert pods.claim_not_reserved(bound, {"metadata": {"name": "c-gpus"}}) is not None


@pytest.mark.cluster
def test_a_late_event_of_a_pod_that_has_run_since_is_no_refusal(
    dra_tenancy: tuple[Kube, ApiServer, str, str], k8s: Any, unique_name: Callable[[str], str]
) -> None:
    """A pod's events may reach the worker late, under load: a short container can have started
    and ended since its binding's event, and the resourceclaim controller takes an ended pod's
    reservation back. Such an event (bound, Pending, not started) with the claim since released
    is no refusal: the worker reads the pod again after its claim, and only a pod still bound and
    not started then was never reserved (else the container would run twice)."""
    kube, api, _, _ = dra_tenancy
    namespace = unique_name("late")
    kube.call(kube.core.create_namespace, {"metadata": {"name": namespace}})
    try:
        pod = {
            "metadata": {"name": "late", "namespace": namespace},
            "spec": {
                "containers": [{"name": "main", "image": "busybox:1.36", "resources": {"claims": [{"name": "gpus"}]}}],
                "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "gpucaas-gpus-2"}],
            },
        }
        kube.call(kube.core.create_namespaced_pod, namespace, pod)
        _claim_for(kube, get_pod(k8s, namespace, "late"), reserved=False)
        bind_pod(k8s, namespace, "late", "gpu-node-a")
        late = get_pod(k8s, namespace, "late")  # the binding's event, as the worker would get it
        worker = api.worker
        assert "ClaimNotReserved" in (worker._claim_not_reserved(late) or ""), "bound and not started: refused"

        main = {"name": "main", "image": "busybox:1.36", "imageID": "", "ready": False, "restartCount": 0}
        ended = {"containerStatuses": [{**main, "state": {"terminated": {"exitCode": 0}}}]}
        set_pod_status(k8s, namespace, "late", {"phase": "Succeeded", **ended})
        assert worker._claim_not_reserved(late) is None, "the pod has run since: its late event is no refusal"

        kube.call(kube.core.delete_namespaced_pod, "late", namespace, grace_period_seconds=0)
        wait_for(lambda: get_pod(k8s, namespace, "late") is None, 60, what="the pod gone")
        assert worker._claim_not_reserved(late) is None, "the pod is gone: its late event is no refusal"
    finally:
        kube.call(kube.core.delete_namespace, namespace)
