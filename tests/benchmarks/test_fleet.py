"""The fleet benchmark on the real control plane: a tiny fleet of kwok nodes, a short trace through
kube-scheduler and the gpucaas extender, and the figures it reports.

Its own cluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) and kwok, from the
pinned binaries; about half a minute on the 2-core development machine.
"""

from __future__ import annotations

from benchmarks import fleet
from benchmarks.kit.workload import Job


def test_the_extender_places_a_short_trace_on_kwok_nodes_on_whole_partitions() -> None:
    figures = fleet.run(
        nodes=4,
        load=0.9,
        hour_s=6.0,
        warmup_h=0.5,
        measure_h=1.5,
        seed=7,
        burst_fraction=0.5,
        modes=["extender"],
        log=lambda _: None,
    )

    for key in (
        "nodes",
        "gpus",
        "gpu_hours_ratio_vs_most_allocated",
        "dra_gpu_hours_ratio_vs_most_allocated",
        "dra_extender_gpu_hours_ratio_vs_most_allocated",
        "invalid_partitions_most_allocated",
        "invalid_partitions_extender",
        "scheduled_per_s_most_allocated",
        "scheduled_per_s_extender",
        "scheduled_per_s_dra",
        "schedule_p99_ms_extender",
        "eight_gpu_wait_p99_s_most_allocated",
        "eight_gpu_wait_p99_s_extender",
        "gpu_hours_ratio_vs_bound_extender",
        "invalid_partitions_dra",
        "invalid_partitions_dra_extender",
        "dra_scheduler_cpu_ms_per_pod",
        "scheduler_cpu_ms_per_pod_extender",
    ):
        assert key in figures, key
    # the DRA mode did not run: no figure of it
    assert figures["dra_scheduler_cpu_ms_per_pod"] is None
    assert set(figures["targets_met"]) >= {
        "scheduled_per_s_extender>=most_allocated",
        "dra_gpu_hours_ratio_vs_most_allocated>=0.9",
    }
    assert (figures["nodes"], figures["gpus"]) == (4, 32)
    ext = figures["modes"]["extender"]
    assert ext["errors"] == 0, ext["first_errors"]
    assert ext["pods_placed"] > 0 and ext["burst_bound"] == ext["burst_pods"] > 0
    # every 2/4/8-GPU placement is one whole NVLink partition of its size, and no GPU is given twice
    assert figures["invalid_partitions_extender"] == 0
    assert ext["overlapping_placements"] == 0
    assert 0 < figures["gpu_hours_ratio_vs_bound_extender"] <= 1.05
    assert figures["scheduled_per_s_extender"] > 0
    assert figures["schedule_p99_ms_extender"] > 0


def test_the_pooled_bound_serves_what_fits_and_never_more_than_the_fleet() -> None:
    jobs = [Job(0.0, 2.0, 8), Job(0.0, 2.0, 8), Job(0.5, 1.0, 4)]
    trace = fleet.Trace(jobs, warmup_h=0.0, measure_h=2.0)
    bound = fleet.pooled_bound(trace, capacity=16)
    # the 4-GPU job waits for a board: it would run 0.5..1.5 h, the pool is full until 2 h
    assert bound["pooled_bound_gpu_hours"] == 32.0
    assert bound["offered_gpu_hours"] == 36.0
    assert bound["fluid_bound_gpu_hours"] == 32.0
    roomy = fleet.pooled_bound(trace, capacity=24)
    assert roomy["pooled_bound_gpu_hours"] == roomy["offered_gpu_hours"] == 36.0
