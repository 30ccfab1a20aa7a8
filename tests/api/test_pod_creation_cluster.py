"""The API's pod creation, on the local cluster or (``KUBECONFIG`` set) on a real cluster.

Admission is the point on a real cluster: the tenant namespace is labelled as the
tenancy controller labels it (Pod Security ``restricted`` enforced), the RuntimeClass
exists as the chart creates it, and the pod the API builds must be admitted. No
test-only hooks are used; everything created carries a unique name and is removed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from core import crds
from core.kube import Conflict, Kube, NotFound
from devtools.waiting import wait_for
from tests.api.harness import ApiServer
from tests.api.kube_helpers import get_pod

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
        with api.client() as admin:
            assert admin.post("/v1/admin/tenancies", json={"name": tenancy, "gpu_quota": 1}).status_code == 201
            token = admin.post(f"/v1/admin/tenancies/{tenancy}/tokens").json()["token"]
        # the tenancy controller's part, as it does it: the labelled namespace, then Ready
        kube.call(
            kube.core.create_namespace,
            {"metadata": {"name": namespace, "labels": {crds.LABEL_TENANCY: tenancy, **PSA_RESTRICTED}}},
        )
        wait_for(lambda: _tenancy(kube, tenancy), 60, what="tenancy upserted by the API")
        kube.call(
            kube.custom.patch_cluster_custom_object_status,
            crds.GROUP,
            crds.VERSION,
            crds.TENANCY_PLURAL,
            tenancy,
            {"status": {"phase": "Ready", "namespace": namespace, "observedGeneration": 1}},
        )
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
        try:
            kube.call(kube.core.delete_namespace, namespace)
        except NotFound:
            pass
        try:
            kube.call(kube.custom.delete_cluster_custom_object, crds.GROUP, crds.VERSION, crds.TENANCY_PLURAL, tenancy)
        except NotFound:
            pass


def _tenancy(kube: Kube, name: str) -> dict[str, Any] | None:
    try:
        return kube.call(kube.custom.get_cluster_custom_object, crds.GROUP, crds.VERSION, crds.TENANCY_PLURAL, name)
    except NotFound:
        return None


@pytest.mark.cluster
def test_in_dra_mode_the_api_creates_a_pod_claiming_from_the_tenant_template(
    kubeconfig: Path,
    k8s: Any,
    serve: Callable[..., ApiServer],
    database_url: str,
    unique_name: Callable[[str], str],
) -> None:
    """allocation_mode dra: the pod names the namespace's template gpucaas-gpus-N and carries
    no extended resource; the API server admits it (Pod Security restricted; resource.k8s.io/v1
    served: Kubernetes 1.34+), and the API reports the GPU count it asked for."""
    from core import dra

    kube = Kube.of(k8s)
    tenancy = unique_name("dratest")
    namespace = crds.tenant_namespace(tenancy)
    _ensure_runtime_class(kube)
    api = serve(database_url, kubeconfig, allocation_mode="dra")
    try:
        with api.client() as admin:
            assert admin.post("/v1/admin/tenancies", json={"name": tenancy, "gpu_quota": 8}).status_code == 201
            token = admin.post(f"/v1/admin/tenancies/{tenancy}/tokens").json()["token"]
        # the tenancy controller's part in dra mode: the labelled namespace and the claim templates
        kube.call(
            kube.core.create_namespace,
            {"metadata": {"name": namespace, "labels": {crds.LABEL_TENANCY: tenancy, **PSA_RESTRICTED}}},
        )
        template = dra.claim_template(2, namespace)
        kube.call(
            kube.custom.create_namespaced_custom_object,
            "resource.k8s.io",
            "v1",
            namespace,
            "resourceclaimtemplates",
            template,
        )
        wait_for(lambda: _tenancy(kube, tenancy), 60, what="tenancy upserted by the API")
        kube.call(
            kube.custom.patch_cluster_custom_object_status,
            crds.GROUP,
            crds.VERSION,
            crds.TENANCY_PLURAL,
            tenancy,
            {"status": {"phase": "Ready", "namespace": namespace, "observedGeneration": 1}},
        )
        with api.client(token) as tenant:
            cid = tenant.post(
                "/v1/containers",
                json={"container-url": "busybox:1.36", "tenancy": tenancy, "gpus": 2, "command": ["sleep", "1"]},
            ).json()["id"]
            pod = wait_for(lambda: get_pod(k8s, namespace, f"gpucaas-{cid}"), 60, what="the API's pod")
            status = tenant.get(f"/v1/containers/{cid}").json()
        assert status["status"] in ("Pending", "Running", "Succeeded"), status
        spec = pod["spec"]
        assert spec["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": "gpucaas-gpus-2"}]
        main = spec["containers"][0]
        assert main["resources"]["claims"] == [{"name": "gpus"}]
        assert "nvidia.com/gpu" not in main["resources"].get("limits", {})
        assert status["gpus"] == 2
    finally:
        try:
            kube.call(kube.core.delete_namespace, namespace)
        except NotFound:
            pass
        try:
            kube.call(kube.custom.delete_cluster_custom_object, crds.GROUP, crds.VERSION, crds.TENANCY_PLURAL, tenancy)
        except NotFound:
            pass
