"""reconcile_tenancy (the plan), tenancy_status (conditions), ownership and drift checks: pure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from services.tenancy_controller import builders, reconcile
from services.tenancy_controller.errors import InvalidSpec, NotReadyYet
from services.tenancy_controller.policies import NetworkConfig
from services.tenancy_controller.workflow import Context, child_drifted

from .factories import tenancy_body

NET = NetworkConfig()
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def kinds(plan):
    return [(o["kind"], o["metadata"]["name"]) for o in plan.objects]


def test_plan_without_nfs_prunes_storage():
    plan = reconcile.reconcile_tenancy(tenancy_body("acme", uid="u"), network=NET)
    assert kinds(plan) == [
        ("Namespace", "tenant-acme"),
        ("CiliumNetworkPolicy", "tenant-isolation"),
        ("NetworkPolicy", "tenant-isolation"),
        ("ResourceQuota", "tenant-quota"),
        ("LimitRange", "tenant-limits"),
    ]
    assert plan.absent == [
        ("PersistentVolumeClaim", "tenant-storage", "tenant-acme"),
        ("PersistentVolume", "tenant-acme-storage", None),
    ]
    assert plan.namespace_owned


def test_plan_with_nfs():
    plan = reconcile.reconcile_tenancy(
        tenancy_body("acme", uid="u", nfs={"server": "10.0.0.9", "path": "/e"}), network=NET
    )
    assert kinds(plan)[-2:] == [
        ("PersistentVolume", "tenant-acme-storage"),
        ("PersistentVolumeClaim", "tenant-storage"),
    ]
    assert plan.absent == []


def test_existing_foreign_namespace_is_used_without_owner_reference():
    ns = {"metadata": {"name": "tenant-acme", "labels": {"team": "x"}}}
    plan = reconcile.reconcile_tenancy(tenancy_body("acme", uid="u"), network=NET, observed_namespace=ns)
    assert not plan.namespace_owned
    assert "ownerReferences" not in plan.components["Namespace"][0]["metadata"]
    assert "never deleted" in plan.notes["Namespace"]


def test_own_namespace_stays_owned():
    body = tenancy_body("acme", uid="u")
    ns = builders.build_namespace(reconcile.parse_tenancy(body))
    assert reconcile.reconcile_tenancy(body, network=NET, observed_namespace=ns).namespace_owned


def test_namespace_of_another_tenancy_is_invalid():
    ns = {"metadata": {"name": "tenant-acme", "ownerReferences": [{"kind": "Tenancy", "uid": "other"}]}}
    with pytest.raises(InvalidSpec, match="belongs to another Tenancy"):
        reconcile.reconcile_tenancy(tenancy_body("acme", uid="u"), network=NET, observed_namespace=ns)


def test_terminating_namespace_means_wait():
    ns = {"metadata": {"name": "tenant-acme", "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    with pytest.raises(NotReadyYet):
        reconcile.reconcile_tenancy(tenancy_body("acme", uid="u"), network=NET, observed_namespace=ns)


OK = reconcile.Outcome(True, "Reconciled", "fine")


def test_ready_only_when_every_component_is_ok():
    plan = reconcile.reconcile_tenancy(tenancy_body("acme", uid="u", generation=3), network=NET)
    all_ok = {c: OK for c in reconcile.COMPONENTS}
    st = reconcile.tenancy_status(plan, all_ok, previous=None, now=T0)
    assert st["phase"] == "Ready" and st["namespace"] == "tenant-acme" and st["observedGeneration"] == 3
    assert [c["type"] for c in st["conditions"]] == [
        "Ready",
        "NamespaceReady",
        "NetworkPolicyReady",
        "QuotaReady",
        "StorageReady",
    ]
    assert all(
        c["status"] == "True" and c["lastTransitionTime"] == "2026-01-01T00:00:00Z" and c["observedGeneration"] == 3
        for c in st["conditions"]
    )

    broken = {**all_ok, "NetworkPolicy": reconcile.Outcome(False, "CiliumNotInstalled", "no cilium.io/v2")}
    st2 = reconcile.tenancy_status(plan, broken, previous=st, now=T0 + timedelta(minutes=1))
    assert st2["phase"] == "Pending"
    cond = {c["type"]: c for c in st2["conditions"]}
    assert cond["Ready"] == {
        "type": "Ready",
        "status": "False",
        "reason": "CiliumNotInstalled",
        "message": "NetworkPolicyReady: no cilium.io/v2",
        "lastTransitionTime": "2026-01-01T00:01:00Z",
        "observedGeneration": 3,
    }
    assert cond["QuotaReady"]["lastTransitionTime"] == "2026-01-01T00:00:00Z"  # unchanged status keeps its time
    missing = reconcile.tenancy_status(plan, {"Namespace": OK}, previous=None, now=T0)
    assert missing["phase"] == "Pending"


def test_failed_and_terminating_status():
    body = tenancy_body("acme", uid="u", generation=2)
    st = reconcile.failed_status(
        body, InvalidSpec("spec.gpuQuota", "must be between 0 and 100000, got -1"), previous=None, now=T0
    )
    assert st == {
        "phase": "Failed",
        "message": "spec.gpuQuota: must be between 0 and 100000, got -1",
        "namespace": "tenant-acme",
        "observedGeneration": 2,
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "InvalidSpec",
                "message": "spec.gpuQuota: must be between 0 and 100000, got -1",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
                "observedGeneration": 2,
            }
        ],
    }
    term = reconcile.terminating_status(body, "waiting for 1 pod(s)", previous=st, now=T0)
    assert term["phase"] == "Terminating" and term["conditions"][0]["reason"] == "Terminating"
    assert not reconcile.status_changed(term, dict(term))


def test_matches_ignores_server_fields_but_not_ours():
    desired = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "q", "labels": {"a": "1"}},
        "spec": {"hard": {"pods": "5"}},
    }
    live = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "q", "labels": {"a": "1", "b": "2"}, "resourceVersion": "9"},
        "spec": {"hard": {"pods": "5"}},
        "status": {"used": {"pods": "1"}},
    }
    assert reconcile.matches(desired, live)
    assert not reconcile.matches(desired, {**live, "spec": {"hard": {"pods": "6"}}})
    assert not reconcile.matches(desired, {**live, "metadata": {"name": "q", "labels": {}}})
    assert not reconcile.matches(desired, {**live, "metadata": {**live["metadata"], "deletionTimestamp": "x"}})
    assert not reconcile.is_subset([1, 2], [1, 2, 3])


def test_child_drift_detection_is_pure():
    ctx = Context(kube=None, network=NET)  # type: ignore[arg-type]  # no API call is made
    body = tenancy_body("acme", uid="u", gpu_quota=4)
    plan = reconcile.reconcile_tenancy(body, network=NET)
    quota = next(o for o in plan.objects if o["kind"] == "ResourceQuota")
    assert not child_drifted(ctx, body, quota)
    edited = {**quota, "spec": {"hard": {**quota["spec"]["hard"], "requests.nvidia.com/gpu": "99"}}}
    assert child_drifted(ctx, body, edited)
    assert not child_drifted(ctx, tenancy_body("acme", uid="u", gpu_quota=-5), edited)  # invalid: nothing to restore
