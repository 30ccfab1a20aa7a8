"""The sandbox runner's options that need no running sandbox: API replicas need a database
they can share, and kube-apiserver's compaction interval reaches its command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools.local_cluster import ClusterOptions, LocalCluster
from devtools.sandbox import runner


@pytest.mark.parametrize("database_url", [None, "sqlite:///x.db"])
def test_several_api_replicas_need_a_shared_database(tmp_path: Path, database_url: str | None) -> None:
    with pytest.raises(ValueError, match="PostgreSQL"):
        runner.start(tmp_path / "state", api_replicas=2, database_url=database_url)
    assert not (tmp_path / "state").exists()  # refused before anything started


def test_the_compaction_interval_reaches_kube_apiserver(tmp_path: Path) -> None:
    cluster = LocalCluster(
        tmp_path, ClusterOptions(compaction_interval="10s", audit_policy=None), bin_dir=tmp_path / "bin"
    )
    cluster._prepare()
    args = cluster.children["kube-apiserver"].args
    assert args[args.index("--etcd-compaction-interval") + 1] == "10s"
