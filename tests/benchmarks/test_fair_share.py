"""The fairness benchmark's fair share and its figures, on hand-made runs (no cluster; the run
itself, two clusters and a trace of minutes, is not in the tests)."""

from __future__ import annotations

import pytest

from benchmarks.kit.workload import Job
from benchmarks.kwok_fleet.fair_share import fair_allocation, guaranteed_waits, share_figures
from benchmarks.kwok_fleet.pod_record import PodRecord
from benchmarks.kwok_fleet.tenancy_trace import TenancyPlan, owners_of, plan_tenancies

ONE = {"a": 1.0, "b": 1.0, "c": 1.0}


def test_a_guarantee_is_given_first_and_the_rest_by_weight_above_it() -> None:
    # a is guaranteed 8 and wants 20; b, unguaranteed, wants 20: the 8 left are split evenly above a's 8
    assert fair_allocation(16, {"a": 20, "b": 20}, {"a": 8}, ONE) == {"a": 12.0, "b": 4.0}
    # by weight: c (weight 3) gets three times b's part of what a's small demand leaves
    assert fair_allocation(16, {"a": 2, "b": 20, "c": 20}, {"a": 8}, {"a": 1, "b": 1, "c": 3}) == {
        "a": 2,
        "b": 3.5,
        "c": 10.5,
    }


def test_no_tenancy_gets_more_than_it_asks_for_and_what_it_leaves_goes_to_the_others() -> None:
    fair = fair_allocation(16, {"a": 8, "b": 8, "c": 2}, {"a": 8}, ONE)
    assert fair == {"a": 8, "b": 6.0, "c": 2}
    assert fair_allocation(16, {"a": 1, "b": 2}, {}, ONE) == {"a": 1, "b": 2}


def test_guarantees_beyond_the_fleet_are_scaled_down_alike() -> None:
    assert fair_allocation(8, {"a": 8, "b": 8}, {"a": 8, "b": 8}, ONE) == {"a": 4.0, "b": 4.0}


def _plan(name: str, guaranteed: int) -> TenancyPlan:
    return TenancyPlan(name, guaranteed, 1.0, 0.5, 0.0)


def _pod(name: str, tenancy: str, size: int, created: float, running: float | None, ended: float | None) -> PodRecord:
    rec = PodRecord(name, size, 100.0, 0.0, "trace", created=created, tenancy=tenancy)
    rec.bound = rec.running = running
    rec.ended = ended
    return rec


def test_the_share_error_is_what_a_tenancy_was_served_against_its_fair_share_of_the_fleet() -> None:
    plans = [_plan("a", 0), _plan("b", 0)]
    # over [1, 11) both want 8 GPUs of 8: fair is 4 each; a holds all 8 the whole window
    pods = [_pod("a1", "a", 8, 1.0, 1.0, None), _pod("b1", "b", 8, 1.0, None, None)]
    figures = share_figures(pods, plans, capacity=8, lo=1.0, hi=11.0, window_s=10.0)
    assert figures["share_samples"] == 2
    assert figures["share_error_max"] == pytest.approx(0.5)  # 8 - 4 GPUs of the fleet's 8


def test_only_work_that_fits_in_its_tenancys_guarantee_counts_for_the_guaranteed_wait() -> None:
    plans = [_plan("a", 8)]
    pods = [
        _pod("first", "a", 4, 1.0, 2.0, None),  # fits: waited 1 s
        _pod("second", "a", 4, 3.0, 6.0, None),  # 4 held + 4 = 8: fits, waited 3 s
        _pod("third", "a", 2, 7.0, 7.5, None),  # 8 held: beyond the guarantee, not counted
    ]
    assert guaranteed_waits(pods, plans, lo=0.0, hi=10.0) == [1.0, 3.0]
    assert guaranteed_waits(pods, plans, lo=0.0, hi=10.0, count="held") == [1.0, 3.0]


def test_a_pod_behind_its_own_tenancys_waiting_work_beyond_the_guarantee_is_not_guaranteed() -> None:
    """The tenancy's waiting pods count in its demand: an 8-GPU pod waiting for a partition fills a
    guarantee of 8, so a 1-GPU pod made after it is beyond the guarantee (its fair share is not its
    whole demand), though nothing of the tenancy is bound yet."""
    plans = [_plan("a", 8)]
    pods = [
        _pod("big", "a", 8, 1.0, 9.0, None),  # waits 8 s for a whole partition
        _pod("small", "a", 1, 2.0, 12.0, None),  # 8 + 1 > 8: not guaranteed
        _pod("later", "a", 1, 20.0, 21.0, None),  # 8 (big, running) + 1 > 8: not guaranteed
    ]
    assert guaranteed_waits(pods, plans, lo=0.0, hi=30.0) == [8.0]
    # counting bound pods only, the small one counted though it waited on its own tenancy
    assert guaranteed_waits(pods, plans, lo=0.0, hi=30.0, count="held") == [8.0, 10.0]


def test_the_tenancies_are_unequal_and_the_same_for_a_seed() -> None:
    plans = plan_tenancies(20, 320, guaranteed_fraction=0.5, seed=3)
    assert plans == plan_tenancies(20, 320, guaranteed_fraction=0.5, seed=3)
    assert len({p.guaranteed for p in plans}) > 3 and len({p.weight for p in plans}) > 2
    assert sum(p.guaranteed for p in plans) <= 160
    owners = owners_of([Job(float(i), 1.0, 1) for i in range(2000)], plans, seed=4)
    counts = [sum(1 for t, _ in owners if t == p.name) for p in plans]
    assert counts[0] > 5 * counts[-1]  # demand falls as 1 / (i + 1)
    assert any(interruptible for _, interruptible in owners)
