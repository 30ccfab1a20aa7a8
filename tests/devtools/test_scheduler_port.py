"""kube-scheduler's serving port is picked when it starts, and picked again when another process
took it meanwhile (a parallel run on the same machine): the start does not fail on it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from devtools.local_cluster import ClusterOptions, LocalCluster, cluster as cluster_module


def test_a_scheduler_port_taken_meanwhile_is_picked_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = LocalCluster(tmp_path, ClusterOptions(unsafe_no_fsync=True, run_scheduler=False, audit_policy=None))
    cluster.start()
    try:
        with socket.socket() as held:
            held.bind(("127.0.0.1", 0))
            held.listen()
            taken = held.getsockname()[1]
            picks = iter([taken])
            real = cluster_module.free_port
            monkeypatch.setattr(cluster_module, "free_port", lambda: next(picks, None) or real())
            cluster.start_scheduler(
                {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}
            )
        assert next(picks, None) is None  # the port was picked at the start, the taken one first
        scheduler = cluster.children["kube-scheduler"]
        assert scheduler.process is not None and scheduler.process.poll() is None  # serving (ready: its /healthz)
        assert "--secure-port" in scheduler.args and str(taken) not in scheduler.args
    finally:
        cluster.stop()
