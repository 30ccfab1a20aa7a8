"""The stand-in resourceclaim controller against the API emulator: claims from templates,
found again after a crash, released, deallocated and deleted as kube-controller-manager's
resourceclaim controller does (pkg/controller/resourceclaim)."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from gpucaas.core import dra
from gpucaas.programs.sandbox.claim_controller import POD_CLAIM_NAME, ClaimController
from gpucaas.programs.sandbox.dra_demo import dra_pod, ensure_namespace

NS = "claims"


def _claims(custom: client.CustomObjectsApi) -> list[dict[str, Any]]:
    return custom.list_namespaced_custom_object("resource.k8s.io", "v1", NS, "resourceclaims")["items"]


def _pod(core: client.CoreV1Api, k8s: client.ApiClient, name: str) -> dict[str, Any]:
    return k8s.sanitize_for_serialization(core.read_namespaced_pod(name, NS))


def test_a_pods_claim_is_made_once_from_its_template_and_reported(k8s: client.ApiClient) -> None:
    core, custom = client.CoreV1Api(k8s), client.CustomObjectsApi(k8s)
    ensure_namespace(core, custom, NS, sizes=(4,))
    core.create_namespaced_pod(NS, dra_pod("four", 4))
    ctl = ClaimController(k8s)
    ctl.sync()
    (claim,) = _claims(custom)
    pod = _pod(core, k8s, "four")
    assert pod["status"]["resourceClaimStatuses"] == [{"name": "gpus", "resourceClaimName": claim["metadata"]["name"]}]
    assert claim["metadata"]["name"].startswith("four-gpus-")
    assert claim["metadata"]["annotations"][POD_CLAIM_NAME] == "gpus"
    (owner,) = claim["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("Pod", pod["metadata"]["uid"], True)
    assert claim["spec"] == dra.claim_template(4, NS)["spec"]["spec"]

    # a crash between the create and the status write: the claim is found again, not made twice
    core.patch_namespaced_pod_status("four", NS, {"status": {"resourceClaimStatuses": None}})
    assert not _pod(core, k8s, "four")["status"].get("resourceClaimStatuses")
    ctl.sync()
    assert [c["metadata"]["name"] for c in _claims(custom)] == [claim["metadata"]["name"]]
    assert _pod(core, k8s, "four")["status"]["resourceClaimStatuses"][0]["resourceClaimName"] == claim["metadata"]["name"]


def test_a_done_pod_gives_up_its_claim(k8s: client.ApiClient) -> None:
    core, custom = client.CoreV1Api(k8s), client.CustomObjectsApi(k8s)
    ensure_namespace(core, custom, NS, sizes=(1,))
    core.create_namespaced_pod(NS, dra_pod("one", 1))
    core.create_namespaced_pod(NS, dra_pod("other", 1))
    ctl = ClaimController(k8s)
    ctl.sync()
    one, other = (_pod(core, k8s, n) for n in ("one", "other"))
    name = one["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    claim = custom.get_namespaced_custom_object("resource.k8s.io", "v1", NS, "resourceclaims", name)
    # as if the scheduler had allocated the claim and reserved it for both pods
    claim["status"] = {"allocation": {"devices": {"results": [
        {"request": "gpus", "driver": dra.DRIVER, "pool": "n", "device": "gpu-p7"}]}},
        "reservedFor": [{"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}
                        for p in (one, other)]}
    custom.replace_namespaced_custom_object_status("resource.k8s.io", "v1", NS, "resourceclaims", name, claim)

    core.patch_namespaced_pod_status("other", NS, {"status": {"phase": "Succeeded"}})
    ctl.sync()
    claim = custom.get_namespaced_custom_object("resource.k8s.io", "v1", NS, "resourceclaims", name)
    assert [r["name"] for r in claim["status"]["reservedFor"]] == ["one"]  # still allocated, for "one"
    assert claim["status"]["allocation"]

    core.patch_namespaced_pod_status("one", NS, {"status": {"phase": "Succeeded"}})
    ctl.sync()
    assert name not in {c["metadata"]["name"] for c in _claims(custom)}  # its pod is done: deleted
