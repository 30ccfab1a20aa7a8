"""The sandbox scheduler writes a pod's ``Unschedulable`` condition once, not on every pass:
with a backlog, rewriting it each pass made every pass wake the next one (a busy loop)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from gpucaas.programs.sandbox.scheduler import SandboxScheduler


@pytest.fixture
def api(tmp_path: Path) -> Iterator[client.ApiClient]:
    from gpucaas.devtools.kube_emulator import KubeEmulator

    emu = KubeEmulator(host="127.0.0.1", port=0).start()
    try:
        api = config.new_client_from_config(config_file=str(emu.write_kubeconfig(tmp_path / "kubeconfig")))
        yield api
        api.close()
    finally:
        emu.stop()


def _pod(api: client.ApiClient, name: str) -> dict[str, Any]:
    return api.sanitize_for_serialization(client.CoreV1Api(api).read_namespaced_pod(name, "default"))


def test_an_unschedulable_pod_is_marked_once_per_reason(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod("default", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "waits"},
        "spec": {"containers": [{"name": "main", "image": "busybox",
                                 "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}})
    scheduler = SandboxScheduler(api, extender_url=None)
    assert scheduler.schedule_one(_pod(api, "waits")) is False  # no GPU node at all
    marked = _pod(api, "waits")
    cond = next(c for c in marked["status"]["conditions"] if c["type"] == "PodScheduled")
    assert (cond["status"], cond["reason"], cond["message"]) == ("False", "Unschedulable", "no Ready GPU node")

    for _ in range(3):  # later passes, same reason: no write, so no event to wake another pass
        assert scheduler.schedule_one(_pod(api, "waits")) is False
    assert _pod(api, "waits")["metadata"]["resourceVersion"] == marked["metadata"]["resourceVersion"]
