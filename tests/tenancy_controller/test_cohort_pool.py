"""The cohort's pool (queueing=kueue): its arithmetic, the Cohort and WorkloadPriorityClass wire
objects, and the keeper that writes the Cohort only when the figure moves or the live object
drifts, never an older figure after a newer one, and warns when the guarantees exceed the fleet."""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
from collections.abc import Mapping
from typing import Any

import pytest

from services.tenancy_controller import errors, kube, queues
from services.tenancy_controller.policies import NetworkConfig
from services.tenancy_controller.pool import GUARANTEES_EXCEED_FLEET, PoolKeeper
from services.tenancy_controller.workflow import Context, shared_drifted

FLAVOR = queues.GpuFlavor.of_instance_type("hgx-h100-8")
MANAGED = {"app.kubernetes.io/managed-by": "gpucaas-tenancy-controller"}


@pytest.mark.parametrize(
    ("nodes", "guarantees", "pool", "shortfall"),
    [
        ([8, 8], [8, 0], 8, 0),  # what nobody is guaranteed
        ([8, 8], [], 16, 0),  # nobody guaranteed anything: the whole fleet
        ([8], [8], 0, 0),
        ([8], [8, 4], 0, 4),  # guarantees beyond the fleet: no pool, and a shortfall to say
        ([], [2], 0, 2),
        ([8, 0], [3], 5, 0),  # a node not yet labelled with its count brings nothing
    ],
)
def test_the_pool_is_the_fleet_less_the_guarantees_never_below_zero(nodes, guarantees, pool, shortfall):
    computed = queues.pool_of(nodes, guarantees)
    assert (computed.gpus, computed.shortfall, computed.nodes) == (pool, shortfall, len(nodes))


@pytest.mark.parametrize(
    ("labels", "gpus"),
    [
        ({"nvidia.com/gpu.count": "8"}, 8),
        ({}, 0),  # GPU Feature Discovery has not labelled it yet
        ({"nvidia.com/gpu.count": "eight"}, 0),
        ({"nvidia.com/gpu.count": "-1"}, 0),
    ],
)
def test_a_nodes_gpus_come_from_its_count_label(labels, gpus):
    assert queues.node_gpus({"node.kubernetes.io/instance-type": "hgx-h100-8", **labels}) == gpus


@pytest.mark.parametrize(("spec", "gpus"), [({"guaranteedGpus": 4}, 4), ({}, 0), ({"guaranteedGpus": True}, 0)])
def test_a_tenancys_guarantee_as_the_pool_counts_it(spec, gpus):
    assert queues.guarantee_of({"gpuQuota": 8, **spec}) == gpus


def test_the_cohort_holds_the_pool_as_its_own_nominal_quota_of_the_flavor():
    assert queues.build_cohort(FLAVOR, queues.pool_of([8, 8], [8])) == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Cohort",
        "metadata": {"name": "gpucaas", "labels": MANAGED},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [{"name": "hgx-h100-8", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "8"}]}],
                }
            ]
        },
    }


def test_one_workload_priority_class_per_container_class_interruptible_below_standard():
    classes = {c["metadata"]["name"]: c for c in queues.build_workload_priority_classes()}
    assert set(classes) == {"gpucaas-standard", "gpucaas-interruptible"}
    assert classes["gpucaas-standard"]["value"] > classes["gpucaas-interruptible"]["value"] == 0
    for wpc in classes.values():
        assert (wpc["apiVersion"], wpc["kind"], wpc["metadata"]["labels"]) == (
            "kueue.x-k8s.io/v1beta2",
            "WorkloadPriorityClass",
            MANAGED,
        )
        assert wpc["description"].startswith("gpucaas ")


def test_a_priority_class_deleted_or_edited_is_put_back():
    ctx = Context(kube=None, network=NetworkConfig(), kueue_flavor=FLAVOR)  # type: ignore[arg-type]
    standard = next(c for c in queues.build_workload_priority_classes() if c["metadata"]["name"] == "gpucaas-standard")
    assert shared_drifted(ctx, copy.deepcopy(standard), deleted=False) is None
    assert shared_drifted(ctx, copy.deepcopy(standard), deleted=True) == standard
    assert shared_drifted(ctx, {**copy.deepcopy(standard), "value": 5}, deleted=False) == standard
    someone_elses = {**copy.deepcopy(standard), "metadata": {"name": "batch-high"}}
    assert shared_drifted(ctx, someone_elses, deleted=True) is None


class FakeCohorts:
    """``ensure`` of the Cohort: records what it was given; ``hold`` makes the next call wait."""

    def __init__(self) -> None:
        self.written: list[str] = []
        self.fail: errors.KubeError | None = None
        self.hold: threading.Event | None = None
        self.entered = threading.Event()

    def ensure(self, desired: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        self.entered.set()
        if self.hold is not None:
            self.hold.wait(10)
            self.hold = None
        if self.fail is not None:
            raise self.fail
        (gpus,) = desired["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
        self.written.append(gpus["nominalQuota"])
        meta = {**desired["metadata"], "uid": "c0", "resourceVersion": str(len(self.written))}
        return kube.CREATED, {**copy.deepcopy(desired), "metadata": meta}


class Figures:
    """The indices the handlers read, as a mutable figure."""

    def __init__(self, nodes: list[int], guarantees: list[int]) -> None:
        self.nodes, self.guarantees = nodes, guarantees

    def __call__(self) -> queues.Pool:
        return queues.pool_of(self.nodes, self.guarantees)


def keeper(cohorts: FakeCohorts, warnings: list[tuple[str, str, str]] | None = None) -> PoolKeeper:
    def warn(obj: Mapping[str, Any], reason: str, message: str) -> None:
        assert warnings is not None
        warnings.append((obj["metadata"]["uid"], reason, message))

    return PoolKeeper(cohorts, FLAVOR, warn=warn if warnings is not None else None)  # type: ignore[arg-type]


async def test_the_cohort_is_written_only_when_the_pool_moves_or_the_live_one_drifts():
    cohorts, figures = FakeCohorts(), Figures([8, 8], [8])
    pool = keeper(cohorts)
    await pool.keep(figures)
    await pool.keep(figures)  # nothing moved: a pure comparison, no request
    assert cohorts.written == ["8"]
    figures.nodes = [8]  # a node went
    await pool.keep(figures)
    assert cohorts.written == ["8", "0"]

    live = pool.desired(figures())
    await pool.keep(figures, observed=copy.deepcopy(live))  # the Cohort's own event, as written
    assert cohorts.written == ["8", "0"]
    edited = copy.deepcopy(live)
    edited["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "64"
    await pool.keep(figures, observed=edited)
    await pool.keep(figures, observed=copy.deepcopy(live), deleted=True)
    assert cohorts.written == ["8", "0", "0", "0"]


async def test_a_write_waiting_its_turn_writes_the_figure_of_its_turn_not_an_older_one():
    cohorts, figures = FakeCohorts(), Figures([8, 8], [])
    pool = keeper(cohorts)
    cohorts.hold = threading.Event()
    first = asyncio.create_task(pool.keep(figures))
    await asyncio.to_thread(cohorts.entered.wait, 10)  # the first write is under way with 16
    figures.nodes = [8, 8, 8]  # a node came meanwhile, then another went
    second = asyncio.create_task(pool.keep(figures))
    await asyncio.sleep(0)
    figures.nodes = [8, 8, 8, 8]
    cohorts.hold.set()
    await asyncio.gather(first, second)
    assert cohorts.written == ["16", "32"]
    assert pool.kept == figures()


async def test_a_failed_write_is_said_once_and_tried_again(caplog):
    cohorts, figures = FakeCohorts(), Figures([8], [])
    pool = keeper(cohorts)
    cohorts.fail = errors.Unavailable("Kubernetes unreachable at https://127.0.0.1:6443")
    with caplog.at_level(logging.WARNING, logger="services.tenancy_controller.pool"):
        await pool.keep(figures)
        await pool.keep(figures)  # the resync tries again while nothing is kept
    assert pool.kept is None and len(caplog.records) == 1 and "not written" in caplog.text
    cohorts.fail = None
    await pool.keep(figures)
    assert cohorts.written == ["8"] and pool.kept == figures()


async def test_guarantees_beyond_the_fleet_are_said_once_per_figure_as_a_warning_event(caplog):
    cohorts, figures, warnings = FakeCohorts(), Figures([8], [8, 4]), []
    pool = keeper(cohorts, warnings)
    with caplog.at_level(logging.INFO, logger="services.tenancy_controller.pool"):
        await pool.keep(figures)
        await pool.keep(figures, observed={"kind": "Cohort"}, deleted=True)  # put back: same figure
        assert cohorts.written == ["0", "0"]
        ((uid, reason, message),) = warnings
        assert (uid, reason) == ("c0", GUARANTEES_EXCEED_FLEET)
        assert "guaranteed 12 GPUs but the fleet has 8" in message and "1 nodes of instance type hgx-h100-8" in message
        figures.guarantees = [8, 8]  # still beyond, by another figure: said again
        await pool.keep(figures)
        assert len(warnings) == 2 and "guaranteed 16 GPUs" in warnings[1][2]
        figures.nodes = [8, 8]
        await pool.keep(figures)
    assert len(warnings) == 2 and "fit the fleet (16) again" in caplog.text
