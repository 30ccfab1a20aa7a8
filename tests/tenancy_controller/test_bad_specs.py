"""Bad input: refused by the CRD schema where it can say so, else phase Failed naming the field."""

from __future__ import annotations

import pytest

from services.tenancy_controller import errors

from .conftest import wait_for
from .factories import new_tenancy
from .helpers import conditions, merge_patch, wait_phase


@pytest.mark.parametrize(
    "spec,field",
    [
        (dict(gpu_quota=-1), "spec.gpuQuota"),
        (dict(pod_quota=0), "spec.podQuota"),
        (dict(nfs={"server": "not a host!", "path": "/x"}), "spec.nfs.server"),
        (dict(nfs={"server": "10.0.0.1", "path": "relative/path"}), "spec.nfs.path"),
        (dict(nfs={"server": "10.0.0.1"}), "spec.nfs.path"),
        (dict(nfs={"server": "10.0.0.1", "path": "/x", "capacity": "lots"}), "spec.nfs.capacity"),
    ],
    ids=[
        "negative-gpu-quota",
        "zero-pod-quota",
        "nfs-server-not-a-host",
        "nfs-path-relative",
        "nfs-path-missing",
        "nfs-capacity-not-a-quantity",
    ],
)
def test_schema_rejects(api, spec, field):
    with pytest.raises(errors.Invalid) as info:
        api.create(new_tenancy("bad", **spec))
    assert field.removeprefix("spec.").split(".")[-1] in str(info.value)


@pytest.mark.parametrize(
    "name,spec,detail",
    [
        ("a" * 57, {}, "tenancy name must be a DNS label of at most 56 characters"),
        ("loopback", dict(nfs={"server": "127.0.0.1", "path": "/x"}), "not a loopback"),
        ("metadata", dict(nfs={"server": "169.254.169.254", "path": "/x"}), "link-local (cloud metadata)"),
        ("greedy", dict(gpu_quota=64, pod_quota=2), "a podQuota of at least gpuQuota/8"),
    ],
    ids=["name-too-long", "nfs-loopback", "nfs-metadata-address", "gpu-quota-over-pods"],
)
def test_cel_rules_reject(api, name, spec, detail):
    """The CRD's x-kubernetes-validations (CEL) are enforced by the API server."""
    with pytest.raises(errors.Invalid) as info:
        api.create(new_tenancy(name, **spec))
    assert detail in str(info.value)


@pytest.mark.parametrize(
    "name,spec,field,detail",
    [
        ("dotdot", dict(nfs={"server": "10.0.0.1", "path": "/exports/../etc"}), "spec.nfs.path", "'..'"),
    ],
    ids=["nfs-path-dotdot"],
)
def test_failed_with_precise_condition_while_others_keep_working(api, controller, name, spec, field, detail):
    """Rules the CRD cannot state (semantics) end as phase Failed; a good tenancy is unaffected."""
    api.create(new_tenancy(name, **spec))
    api.create(new_tenancy("good"))
    failed = wait_phase(api, name, "Failed")
    ready = conditions(failed)["Ready"]
    assert ready["status"] == "False" and ready["reason"] == "InvalidSpec"
    assert ready["message"].startswith(f"{field}: ") and detail in ready["message"]
    assert failed["status"]["message"] == ready["message"]
    assert api.get("Namespace", f"tenant-{name}") is None
    wait_phase(api, "good", "Ready")
    api.delete("Tenancy", name)  # a Failed tenancy's finalizer must not get stuck
    wait_for(lambda: api.get("Tenancy", name) is None, what=f"failed tenancy {name} deleted")


def test_failed_tenancy_recovers_when_its_spec_is_fixed(api, controller):
    api.create(new_tenancy("fixme", nfs={"server": "10.20.0.9", "path": "/exports/../etc"}))
    wait_phase(api, "fixme", "Failed")
    merge_patch(api, "fixme", {"spec": {"nfs": {"path": "/exports/fixme"}}})
    tenancy = wait_phase(api, "fixme", "Ready", generation=2)
    assert conditions(tenancy)["StorageReady"]["status"] == "True"


def test_namespace_owned_by_another_tenancy_fails(api, controller):
    other = api.create(new_tenancy("other"))
    api.create(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": "tenant-taken",
                "ownerReferences": [
                    {
                        "apiVersion": "gpucaas.dev/v1alpha1",
                        "kind": "Tenancy",
                        "name": "other",
                        "uid": other["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
        }
    )
    api.create(new_tenancy("taken"))
    failed = wait_phase(api, "taken", "Failed")
    assert "belongs to another Tenancy" in conditions(failed)["Ready"]["message"]
