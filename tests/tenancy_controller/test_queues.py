"""The Kueue objects of a tenancy (queueing=kueue): the exact wire objects, the limits arithmetic,
the plan and status with the Queue component, and the quota that no longer counts GPUs (pure)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import pytest

from services.tenancy_controller import errors, queues, reconcile
from services.tenancy_controller.policies import NetworkConfig
from services.tenancy_controller.spec import Tenancy, TenancySpec, parse_tenancy
from services.tenancy_controller.workflow import Context, children_in_sync, shared_drifted

from .factories import tenancy_body

UID = "0b5e7c1e-1111-4222-8333-444455556666"
OWNER = {"apiVersion": "gpucaas.dev/v1alpha1", "kind": "Tenancy", "name": "acme", "uid": UID, "controller": True}
LABELS = {"gpucaas.dev/tenancy": "acme", "app.kubernetes.io/managed-by": "gpucaas-tenancy-controller"}
FLAVOR = queues.GpuFlavor.of_instance_type("hgx-h100-8")
NET = NetworkConfig()
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def tenancy(**spec) -> Tenancy:
    return Tenancy(name="acme", uid=UID, generation=3, spec=TenancySpec(**spec))


def queued_body(**spec) -> dict:
    body = tenancy_body("acme", uid=UID, generation=3)
    body["spec"].update(spec)
    return body


def test_cluster_queue_in_the_cohort_with_the_guarantee_as_nominal_quota():
    assert queues.build_cluster_queue(tenancy(gpu_quota=8, guaranteed_gpus=3, weight=1.5), FLAVOR) == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "tenancy-acme", "labels": LABELS, "ownerReferences": [OWNER]},
        "spec": {
            "cohortName": "gpucaas",
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "tenant-acme"}},
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "hgx-h100-8",
                            "resources": [
                                {
                                    "name": "nvidia.com/gpu",
                                    "nominalQuota": "3",
                                    "borrowingLimit": "5",
                                    "lendingLimit": "3",
                                }
                            ],
                        }
                    ],
                }
            ],
            "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
            "fairSharing": {"weight": "1500m"},
        },
    }


@pytest.mark.parametrize(
    ("quota", "guaranteed", "nominal", "borrowing", "lending"),
    [
        (8, 8, "8", "0", "8"),  # all guaranteed: nothing to borrow, all of it lent while idle
        (8, 0, "0", "8", "0"),  # nothing guaranteed: everything borrowed, nothing to lend
        (16, 4, "4", "12", "4"),
        (0, 0, "0", "0", "0"),
    ],
)
def test_the_cap_is_the_guarantee_plus_what_may_be_borrowed(quota, guaranteed, nominal, borrowing, lending):
    cq = queues.build_cluster_queue(tenancy(gpu_quota=quota, guaranteed_gpus=guaranteed), FLAVOR)
    (gpus,) = cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert (gpus["nominalQuota"], gpus["borrowingLimit"], gpus["lendingLimit"]) == (nominal, borrowing, lending)
    assert int(gpus["nominalQuota"]) + int(gpus["borrowingLimit"]) == quota


@pytest.mark.parametrize(
    ("weight", "quantity"), [(1.0, "1"), (1.5, "1500m"), (0.001, "1m"), (1000.0, "1000"), (0.25, "250m")]
)
def test_weight_is_written_as_a_canonical_quantity(weight, quantity):
    assert queues.weight_quantity(weight) == quantity


def test_local_queue_and_the_shared_flavor():
    assert queues.build_local_queue(tenancy()) == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "default", "namespace": "tenant-acme", "labels": LABELS, "ownerReferences": [OWNER]},
        "spec": {"clusterQueue": "tenancy-acme"},
    }
    assert queues.build_resource_flavor(FLAVOR) == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "hgx-h100-8", "labels": {"app.kubernetes.io/managed-by": "gpucaas-tenancy-controller"}},
        "spec": {"nodeLabels": {"node.kubernetes.io/instance-type": "hgx-h100-8"}},
    }


def test_with_kueue_the_plan_has_the_queues_and_a_quota_without_gpus():
    body = queued_body(guaranteedGpus=4)
    queued = reconcile.reconcile_tenancy(body, network=NET, kueue_flavor=FLAVOR)
    plain = reconcile.reconcile_tenancy(body, network=NET)
    assert list(queued.components) == [*reconcile.COMPONENTS, reconcile.QUEUE]
    assert list(plain.components) == list(reconcile.COMPONENTS) and not plain.shared
    assert [(o["kind"], o["metadata"]["name"]) for o in queued.components[reconcile.QUEUE]] == [
        ("ClusterQueue", "tenancy-acme"),
        ("LocalQueue", "default"),
    ]
    # the flavor and the classes are shared: applied with the component, never this tenancy's children
    assert [(o["kind"], o["metadata"]["name"]) for o in queued.shared[reconcile.QUEUE]] == [
        ("ResourceFlavor", "hgx-h100-8"),
        ("WorkloadPriorityClass", "gpucaas-standard"),
        ("WorkloadPriorityClass", "gpucaas-interruptible"),
    ]
    assert not {"ResourceFlavor", "WorkloadPriorityClass"} & {o["kind"] for o in queued.objects}
    hard = {o["kind"]: o for o in queued.objects}["ResourceQuota"]["spec"]["hard"]
    plain_hard = {o["kind"]: o for o in plain.objects}["ResourceQuota"]["spec"]["hard"]
    assert plain_hard == {**hard, "requests.nvidia.com/gpu": "8"}


def test_a_quota_still_counting_gpus_is_drift_once_kueue_holds_the_cap():
    queued = reconcile.reconcile_tenancy(queued_body(), network=NET, kueue_flavor=FLAVOR)
    plain = reconcile.reconcile_tenancy(queued_body(), network=NET)
    quota = next(o for o in queued.objects if o["kind"] == "ResourceQuota")
    before = next(o for o in plain.objects if o["kind"] == "ResourceQuota")
    assert not reconcile.matches(quota, before)
    assert reconcile.matches(quota, copy.deepcopy(quota))


def test_kueue_quantities_read_back_in_another_form_are_no_drift():
    cq = queues.build_cluster_queue(tenancy(gpu_quota=8, guaranteed_gpus=8, weight=2.0), FLAVOR)
    live = copy.deepcopy(cq)
    live["spec"]["fairSharing"]["weight"] = "2000m"
    live["spec"]["queueingStrategy"] = "BestEffortFIFO"  # a default the server adds
    assert reconcile.matches(cq, live)
    live["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowingLimit"] = "4"
    assert not reconcile.matches(cq, live)


@pytest.mark.parametrize(
    ("spec", "field", "says"),
    [
        ({"gpuQuota": 8, "guaranteedGpus": 9}, "spec.guaranteedGpus", "at most spec.gpuQuota (8)"),
        ({"guaranteedGpus": -1}, "spec.guaranteedGpus", "between 0"),
        ({"weight": 0}, "spec.weight", "from 0.001 to 1000"),
        ({"weight": True}, "spec.weight", "from 0.001"),
        ({"weight": "2"}, "spec.weight", "got '2'"),
    ],
)
def test_invalid_guarantee_or_weight_names_the_field(spec, field, says):
    with pytest.raises(errors.InvalidSpec) as caught:
        parse_tenancy(queued_body(**spec))
    assert caught.value.field == field and says in str(caught.value)


def test_guarantee_and_weight_default_to_none_and_an_equal_share():
    parsed = parse_tenancy(tenancy_body("acme"))
    assert (parsed.spec.guaranteed_gpus, parsed.spec.weight) == (0, 1.0)


def test_ready_waits_for_the_queues_and_a_missing_kueue_says_so():
    plan = reconcile.reconcile_tenancy(queued_body(), network=NET, kueue_flavor=FLAVOR)
    ok = reconcile.Outcome(True, "Reconciled", "fine")
    outcomes = {c: ok for c in plan.components}
    assert reconcile.tenancy_status(plan, outcomes, previous=None, now=T0)["phase"] == "Ready"
    missing = reconcile.Outcome(False, "KueueNotInstalled", "queueing is kueue but ... install Kueue")
    status = reconcile.tenancy_status(plan, {**outcomes, reconcile.QUEUE: missing}, previous=None, now=T0)
    ready = {c["type"]: c for c in status["conditions"]}
    assert status["phase"] == "Pending"
    assert (ready["Ready"]["reason"], ready["QueueReady"]["status"]) == ("KueueNotInstalled", "False")
    assert "install Kueue" in status["message"]


class _NoKube:
    def __getattr__(self, name: str):  # any use of the API is a failure here
        raise AssertionError(f"used the API ({name})")


def test_the_resync_checks_the_queues_and_the_shared_flavor_is_checked_alone():
    ctx = Context(kube=_NoKube(), network=NET, kueue_flavor=FLAVOR)  # type: ignore[arg-type]
    body = queued_body()
    plan = reconcile.reconcile_tenancy(body, network=NET, kueue_flavor=FLAVOR)
    outcomes = {c: reconcile.Outcome(True, "Reconciled", "ok") for c in plan.components}
    body["status"] = reconcile.tenancy_status(plan, outcomes, previous=None, now=T0)
    live = copy.deepcopy(plan.objects)
    assert children_in_sync(ctx, body, live)
    assert not children_in_sync(ctx, body, [o for o in live if o["kind"] != "LocalQueue"])

    flavor = queues.build_resource_flavor(FLAVOR)
    assert shared_drifted(ctx, copy.deepcopy(flavor), deleted=False) is None
    assert shared_drifted(ctx, copy.deepcopy(flavor), deleted=True) == flavor
    edited = copy.deepcopy(flavor)
    edited["spec"]["nodeLabels"] = {"node.kubernetes.io/instance-type": "other"}
    assert shared_drifted(ctx, edited, deleted=False) == flavor
    other = {**copy.deepcopy(flavor), "metadata": {"name": "someone-elses"}}
    assert shared_drifted(ctx, other, deleted=True) is None


def test_with_the_partition_check_every_cluster_queue_lists_it_and_the_check_is_shared():
    body = queued_body(guaranteedGpus=4)
    checked = reconcile.reconcile_tenancy(body, network=NET, kueue_flavor=FLAVOR, partition_check=True)
    plain = reconcile.reconcile_tenancy(body, network=NET, kueue_flavor=FLAVOR)
    cq = checked.components[reconcile.QUEUE][0]
    assert cq["spec"]["admissionChecksStrategy"] == {"admissionChecks": [{"name": "gpucaas-nvlink-partition"}]}
    assert "admissionChecksStrategy" not in plain.components[reconcile.QUEUE][0]["spec"]
    check = queues.build_partition_check()
    assert (
        checked.shared[reconcile.QUEUE][-1]
        == check
        == {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "AdmissionCheck",
            "metadata": {
                "name": "gpucaas-nvlink-partition",
                "labels": {"app.kubernetes.io/managed-by": "gpucaas-tenancy-controller"},
            },
            "spec": {"controllerName": "gpucaas.dev/nvlink-partition"},
        }
    )
    # turned on or off, the other ClusterQueue is drift: a check nobody answers would hold every Workload
    assert not reconcile.matches(cq, plain.components[reconcile.QUEUE][0])
    assert not reconcile.matches(plain.components[reconcile.QUEUE][0], cq)
    assert reconcile.matches(cq, copy.deepcopy(cq))
    # the check is put back when it drifts, as the flavor is
    ctx = Context(kube=_NoKube(), network=NET, kueue_flavor=FLAVOR, partition_check=True)  # type: ignore[arg-type]
    assert shared_drifted(ctx, copy.deepcopy(check), deleted=True) == check
    assert shared_drifted(ctx, copy.deepcopy(check), deleted=False) is None
    off = Context(kube=_NoKube(), network=NET, kueue_flavor=FLAVOR)  # type: ignore[arg-type]
    assert shared_drifted(off, copy.deepcopy(check), deleted=True) is None
