"""A crash of a chart-installed node daemon (``--install helm``): the container of the
DaemonSet's pod on a node killed as a crash kills it (SIGKILL to every process of its cgroup),
then the kubelet's restart of it awaited, as :meth:`devtools.processes.Supervisor.restart`
does for a daemon that runs as a process of this machine.

The container's processes are found by its cgroup: the real node's kubelet runs the cgroupfs
driver under a cgroup root of its own (:attr:`devtools.real_node.node.RealNode.cgroup_root`),
in which each container's cgroup is named by its containerd id.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devtools.waiting import wait_for

if TYPE_CHECKING:
    from devtools.real_node.node import RealNode

#: how long the kubelet may take to start the container again (its crash back-off, image already there)
RESTART_TIMEOUT = 180.0


def daemon_pod(kubeconfig: Path, namespace: str, component: str, node: str) -> Any:
    """The DaemonSet pod of ``component`` (its ``app.kubernetes.io/component`` label) on ``node``."""
    from kubernetes import client

    from core.kube import new_api_client

    with new_api_client(kubeconfig) as api:
        pods = (
            client.CoreV1Api(api)
            .list_namespaced_pod(
                namespace,
                label_selector=f"app.kubernetes.io/component={component}",
                field_selector=f"spec.nodeName={node}",
            )
            .items
        )
    live = [p for p in pods if p.metadata is not None and p.metadata.deletion_timestamp is None]
    if len(live) != 1:
        raise RuntimeError(f"{len(live)} {component} pods on {node}, not one")
    return live[0]


def container_pids(real: RealNode, container_id: str) -> list[int]:
    """The processes of the container ``container_id`` (containerd's id) on ``real``'s cgroup root."""
    pids: set[int] = set()
    for root in real.cgroup_dirs():
        try:
            found = list(root.rglob(container_id))
        except OSError:  # a cgroup going while it is walked
            continue
        for folder in found:
            try:
                pids.update(int(p) for p in (folder / "cgroup.procs").read_text().split())
            except OSError:
                continue
    return sorted(pids)


def _container(pod: Any) -> Any:
    statuses = pod.status.container_statuses or []
    if len(statuses) != 1:
        raise RuntimeError(f"pod {pod.metadata.name}: {len(statuses)} containers, not one")
    return statuses[0]


def crash(kubeconfig: Path, namespace: str, component: str, real: RealNode) -> None:
    """SIGKILL to every process of ``component``'s container on ``real`` (a crash), then wait
    until the kubelet has started it again and it is Ready (its restart count one higher)."""
    before = _container(daemon_pod(kubeconfig, namespace, component, real.name))
    if not before.ready or not before.container_id:
        raise RuntimeError(f"{component} on {real.name} is not running: {before.state}")
    container_id = before.container_id.split("://", 1)[-1]
    pids = container_pids(real, container_id)
    if not pids:
        raise RuntimeError(f"no process of {component}'s container {container_id} under {real.cgroup_root}")
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def restarted() -> bool:
        now = _container(daemon_pod(kubeconfig, namespace, component, real.name))
        return bool(now.restart_count > before.restart_count and now.ready)

    wait_for(restarted, RESTART_TIMEOUT, interval=0.3, what=f"{component} on {real.name} restarted and Ready")
