"""Quantities compared as quantities: a server's canonical form is no drift.

A real API server stores ``resource.Quantity`` fields canonically: an NFS capacity
of ``1024Gi`` reads back as ``1Ti``. A controller comparing strings would replace
the PV (and, the PVC's request being immutable, delete and recreate the claim) on
every pass and never settle.
"""

from __future__ import annotations

from services.tenancy_controller import builders
from services.tenancy_controller.comparison import is_subset, matches

from .conftest import wait_for
from .factories import new_tenancy
from .helpers import merge_patch, wait_phase

PVC = builders.PVC_NAME


def test_canonical_quantities_match_what_was_asked() -> None:
    assert is_subset({"spec": {"capacity": {"storage": "1024Gi"}}}, {"spec": {"capacity": {"storage": "1Ti"}}})
    assert is_subset(
        {"hard": {"requests.nvidia.com/gpu": "4", "pods": "10", "requests.memory": "1024Mi"}},
        {"hard": {"requests.nvidia.com/gpu": "4", "pods": "10", "requests.memory": "1Gi"}},
    )
    assert is_subset(
        {"limits": [{"type": "Container", "default": {"cpu": "1000m", "memory": "8Gi"}}]},
        {"limits": [{"type": "Container", "default": {"cpu": "1", "memory": "8Gi"}}]},
    )
    assert not is_subset({"spec": {"capacity": {"storage": "1024Gi"}}}, {"spec": {"capacity": {"storage": "1T"}}})
    # outside quantity fields, strings stay strings
    assert not is_subset({"spec": {"path": "1024Gi"}}, {"spec": {"path": "1Ti"}})
    assert not is_subset({"limits": [{"type": "Container"}]}, {"limits": [{"type": "Pod"}]})
    assert matches(
        {"kind": "PersistentVolumeClaim", "metadata": {}, "spec": {"resources": {"requests": {"storage": "1024Gi"}}}},
        {"kind": "PersistentVolumeClaim", "metadata": {}, "spec": {"resources": {"requests": {"storage": "1Ti"}}}},
    )


def _canonical(api, kind: str, name: str, namespace: str | None, path: tuple[str, ...]) -> dict:
    """The object as a real API server stores it: its quantity in canonical form (``1Ti``)."""
    live = api.get(kind, name, namespace)
    leaf = live
    for key in path[:-1]:
        leaf = leaf[key]
    if leaf[path[-1]] != "1Ti":  # a server that stores quantities as written: store what a server would
        leaf[path[-1]] = "1Ti"
        live = api.replace(live)
    return live


def test_a_canonical_capacity_reaches_ready_without_replacing_storage(api, controller) -> None:
    api.create(
        new_tenancy(
            "acme",
            gpu_quota=4,
            pod_quota=10,
            nfs={"server": "10.20.0.5", "path": "/exports/acme", "capacity": "1024Gi"},
        )
    )
    wait_phase(api, "acme", "Ready")
    # kube-controller-manager's volume binder writes both objects (claimRef, phase) on its own
    # schedule; the comparison starts once it has nothing left to write.
    for kind, name, namespace in (
        ("PersistentVolume", builders.persistent_volume_name("acme"), None),
        ("PersistentVolumeClaim", PVC, "tenant-acme"),
    ):
        wait_for(
            lambda kind=kind, name=name, namespace=namespace: (
                ((api.get(kind, name, namespace) or {}).get("status") or {}).get("phase") == "Bound"
            ),
            what=f"{kind} {name} bound",
        )
    pv = _canonical(
        api, "PersistentVolume", builders.persistent_volume_name("acme"), None, ("spec", "capacity", "storage")
    )
    pvc = _canonical(api, "PersistentVolumeClaim", PVC, "tenant-acme", ("spec", "resources", "requests", "storage"))

    # Two full reconciles (each a spec change the controller must act on), then the storage is untouched.
    for generation, pods in ((2, 11), (3, 12)):
        merge_patch(api, "acme", {"spec": {"podQuota": pods}})
        wait_phase(api, "acme", "Ready", generation=generation)
        assert api.get("ResourceQuota", builders.QUOTA_NAME, "tenant-acme")["spec"]["hard"]["pods"] == str(pods)

    for before in (pv, pvc):
        meta = before["metadata"]
        after = api.get(before["kind"], meta["name"], meta.get("namespace"))
        assert after["metadata"]["uid"] == meta["uid"], f"{before['kind']} was recreated"
        assert after["metadata"]["resourceVersion"] == meta["resourceVersion"], f"{before['kind']} was replaced"
