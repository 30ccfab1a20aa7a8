"""The placement simulator replays a workload through the real placement code (no timing here)."""

from __future__ import annotations

import json

import pytest

from benchmarks import placement as sim
from services.placement.fit import FULL_MASK


def test_workload_is_seeded_and_offers_the_load() -> None:
    a = sim.workload(nodes=50, load=0.8, horizon_h=4.0, mix=sim.DEFAULT_MIX, seed=7)
    b = sim.workload(nodes=50, load=0.8, horizon_h=4.0, mix=sim.DEFAULT_MIX, seed=7)
    assert a == b and a != sim.workload(nodes=50, load=0.8, horizon_h=4.0, mix=sim.DEFAULT_MIX, seed=8)
    offered = sum(j.size * j.duration for j in a) / (50 * 8 * 4.0)
    assert 0.6 < offered < 1.0  # 0.8 up to sampling noise
    assert {j.size for j in a} == {1, 2, 4, 8}


def test_policies_on_one_arrival_sequence() -> None:
    level = sim.run_level(nodes=40, load=1.1, warmup_h=1.0, measure_h=2.0, mix=sim.DEFAULT_MIX, seed=3)
    ours, spread, bound = level["ours"], level["spread"], level["bound"]
    # ours never places a 2/4/8-GPU job off its NVLink partition: everything placed is served
    assert ours["gpu_hours_placed"] == ours["gpu_hours_served"]
    # arbitrary GPUs on spread nodes mostly miss the partitions
    assert spread["gpu_hours_served"] < spread["gpu_hours_placed"]
    for result in (ours, spread, bound):
        assert 0.0 <= result["acceptance"] <= 1.0
        assert result["gpu_hours_placed"] <= 40 * 8 * 2.0 + 1e-6  # never above capacity
    assert level["ratio_vs_spread"] > 1.0


def test_ours_index_is_consistent_after_a_replay() -> None:
    jobs = sim.workload(nodes=20, load=0.9, horizon_h=2.0, mix=sim.MIX_WITH_ODD, seed=5)
    ours = sim.Ours(20)
    sim.replay(ours, jobs, nodes=20, window=(0.0, 2.0))
    assert ours.index.mask_histogram() == {FULL_MASK: 20}


def test_quick_run_prints_one_json_object_last(capsys: pytest.CaptureFixture[str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    figures = sim.main(["--quick", "--nodes", "30", "--plot", str(tmp_path / "p.png")])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(last) == json.loads(json.dumps(figures))
    for key in ("gpu_hours_ratio_vs_spread", "gpu_hours_ratio_vs_bound", "decision_p99_ms_1k", "decision_p99_ms_10k"):
        assert isinstance(figures[key], float)
    assert (tmp_path / "p.png").stat().st_size > 1000


def test_dra_first_fit_takes_a_whole_free_partition_or_nothing() -> None:
    from core.topology import HGX_H100_PARTITIONS
    from services.placement.fit import gpus_of

    for free in range(FULL_MASK + 1):
        for size in (1, 2, 4, 8):
            got = sim.dra_first_fit(free, size)
            possible = [p for p in HGX_H100_PARTITIONS if p.size == size and p.gpus <= gpus_of(free)]
            assert (got is None) == (not possible)
            if got is not None:
                assert gpus_of(got) in {p.gpus for p in possible}


def test_dra_policies_place_only_whole_partitions_and_leave_nothing_behind() -> None:
    level = sim.run_level(nodes=40, load=1.1, warmup_h=1.0, measure_h=2.0, mix=sim.MIX_WITH_ODD, seed=4)
    for name in ("dra", "dra_extender"):
        assert level[name]["gpu_hours_placed"] == level[name]["gpu_hours_served"]
        assert level[name]["gpu_hours_placed"] <= 40 * 8 * 2.0 + 1e-6
    assert level["most_allocated"]["gpu_hours_served"] <= level["most_allocated"]["gpu_hours_placed"]
    jobs = sim.workload(nodes=20, load=0.9, horizon_h=2.0, mix=sim.MIX_WITH_ODD, seed=6)
    dra = sim.Dra(20, seed=1)
    sim.replay(dra, jobs, nodes=20, window=(0.0, 2.0))
    assert dra.free == [FULL_MASK] * 20
