"""The Time to Running benchmark on the sandbox's real nodes (containerd, runc, the kubelet):
a small burst (20 one-GPU containers over 10 tenancies) with the image cached, and the figures it reports.

About a minute on the 2-core development machine, half of it the sandbox's start-up.
"""

from __future__ import annotations

import math

import pytest

from benchmarks import time_to_running
from devtools.real_node.node import node_tools_missing


def test_post_to_running_on_real_nodes_splits_into_phases_that_add_up() -> None:
    missing = node_tools_missing()
    if missing:
        pytest.skip(f"a real node needs: {', '.join(missing)} (make install adds the packages)")
    figures = time_to_running.run(count=20, tenancies=10, quick=True, kube_only_count=6)

    # every container ran, or its pod was refused by the kubelet (counted apart, left out of the figures)
    assert figures["containers"] + figures["did_not_start"] == figures["gpus"] == 20
    assert figures["containers"] > 0 and figures["tenancies"] == 10
    assert figures["real_nodes"] == 2 and figures["quick"] is True
    # every container that ran has every mark: its containerd events matched to its pod
    assert figures["phases_measured"] == figures["containers"]
    for name in ("running", "queued_running", "post_to_pod", "bound_to_running", *time_to_running.PHASES):
        p50, p99 = figures[f"{name}_p50_ms"], figures[f"{name}_p99_ms"]
        assert not math.isnan(p50) and 0 <= p50 <= p99, (name, p50, p99)
    # the work of starting one is real: the node's part, and runc's within it
    assert figures["kubelet_p50_ms"] > 0 and figures["runc_create_p50_ms"] > 0
    assert figures["running_p50_ms"] <= figures["queued_running_p50_ms"]
    assert 0 <= figures["waited_for_room"] <= figures["containers"]
    assert figures["started_per_s"] > 0
    # the upstream floor in the same run: pods like the API's made on kube-apiserver directly, all ran
    assert figures["kube_only_pods"] == 6 and figures["kube_only_failed"] == 0
    assert 0 < figures["kube_only_running_p50_ms"] <= figures["kube_only_running_p99_ms"]
    # ... split into the same phases, and what the API's path adds to each, in the same run
    assert figures["kube_only_phases_measured"] == 6
    assert figures["kube_only_admission_p50_ms"] == figures["kube_only_api_report_p99_ms"] == 0
    assert figures["kube_only_kubelet_p50_ms"] > 0 and figures["kube_only_runc_create_p50_ms"] > 0
    for phase in time_to_running.PHASES:
        for q in ("p50", "p99"):
            assert not math.isnan(figures[f"kube_only_{phase}_{q}_ms"]), phase
            assert not math.isnan(figures[f"{phase}_beyond_kube_{q}_ms"]), phase
    for q in ("p50", "p99"):
        ratio = figures[f"running_{q}_ratio_vs_kube"]
        assert ratio == round(figures[f"running_{q}_ms"] / figures[f"kube_only_running_{q}_ms"], 2) > 0


def test_the_floor_pod_keeps_the_volumes_that_need_no_other_object_and_drops_the_gpu() -> None:
    from services.api.domain import pods, sizing
    from services.api.settings import Settings

    template = pods.build_pod(
        container_id="c-1",
        tenancy="acme",
        image="busybox:1.36",
        gpus=1,
        command=["sleep", "1"],
        image_pull_secrets=["registry-login"],
        size=sizing.size_for(Settings().share, 1),
        volumes=[{"name": "data", "mount_path": "/data", "read_only": False}],
    )
    floor = time_to_running.kube_only_pod(template, "kube-only-0000")

    assert floor["metadata"]["namespace"] == time_to_running.KUBE_ONLY_NAMESPACE
    spec = floor["spec"]
    # /dev/shm's emptyDir stays, with its mount; the tenancy's claim and its mount go
    assert [v["name"] for v in spec["volumes"]] == [pods.SHM_VOLUME]
    assert spec["volumes"][0]["emptyDir"]["medium"] == "Memory"
    (container,) = spec["containers"]
    assert [m["mountPath"] for m in container["volumeMounts"]] == ["/dev/shm"]
    # no GPU, no pull secret; the same CPU, memory and runtime class
    for kind in ("requests", "limits"):
        assert not any("/" in r for r in container["resources"][kind])
    wanted = template["spec"]["containers"][0]["resources"]["requests"]
    assert container["resources"]["requests"]["cpu"] == wanted["cpu"]
    assert "imagePullSecrets" not in spec
    assert spec["runtimeClassName"] == template["spec"]["runtimeClassName"]
