"""One real node (containerd 2, runc, the pinned kubelet) on a cluster of its own, with the local registries.

Module-scoped: starting a node takes a few seconds, and each test makes pods of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from core.kube import new_api_client
from devtools import waiting
from devtools.local_cluster import ClusterOptions, LocalCluster
from devtools.real_node import big_image, images
from devtools.real_node.node import NodeOptions, RealNode, node_tools_missing
from devtools.real_node.registry import Registries
from devtools.real_node.slow_link import SlowLink

NODE = "real-node"
TIMEOUT = 180.0
#: the big image's files at this fraction of their size (1 MB in all)
SMALL = 0.0002


@dataclass
class Node:
    cluster: LocalCluster
    node: RealNode
    registries: Registries
    core: client.CoreV1Api
    dev_root: Path
    #: the far registry (:mod:`devtools.real_node.slow_link`), holding a small copy of the big image
    link: SlowLink


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    missing = node_tools_missing()
    assert not missing, f"a real node needs: {', '.join(missing)} (make install adds the packages)"
    base = tmp_path_factory.mktemp("real-node")
    cluster = LocalCluster(
        base / "cluster", ClusterOptions(unsafe_no_fsync=True, run_scheduler=False, audit_policy=None)
    ).start()
    registries = node = link = None
    try:
        registries = Registries(base / "registries").start()
        link = SlowLink(base / "link", base / "far-registry").start()
        layout = big_image.write_layout(base / "big-image", scale=SMALL)
        _, repository, tag = images.split(big_image.REFERENCE)
        images.push(layout.path, images.Image(repository, tag), link.address)
        mirrors = {**registries.mirrors(), images.split(big_image.REFERENCE)[0]: link.address}
        dev_root = base / "dev"
        node = RealNode(base / "node", cluster, NodeOptions(NODE, cdi_dirs=(base / "cdi",), mirrors=mirrors)).start()
        api = new_api_client(cluster.admin_kubeconfig)
        core = client.CoreV1Api(api)
        waiting.wait_for(lambda: _default_account(core), TIMEOUT, interval=0.2, what="ServiceAccount default")
        yield Node(cluster, node, registries, core, dev_root, link)
        api.close()
    finally:
        if node is not None:
            node.stop()
        if link is not None:
            link.stop()
        if registries is not None:
            registries.stop()
        cluster.stop()


def _default_account(core: client.CoreV1Api) -> bool:
    try:
        core.read_namespaced_service_account("default", "default")
        return True
    except client.ApiException:
        return False


RESTRICTED = {
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def make_pod(
    core: client.CoreV1Api,
    name: str,
    image: str,
    command: list[str] | None = None,
    *,
    limits: dict[str, str] | None = None,
    pull_secret: str | None = None,
    annotations: dict[str, str] | None = None,
    restart: str = "Never",
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": image,
        "securityContext": RESTRICTED,
        "resources": {"limits": limits or {}},
    }
    if command:
        container["command"] = command
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "restartPolicy": restart,
            "nodeName": NODE,
            "containers": [container],
            "terminationGracePeriodSeconds": 1,
        },
    }
    if pull_secret:
        pod["spec"]["imagePullSecrets"] = [{"name": pull_secret}]
    core.create_namespaced_pod("default", pod)
    return pod


def container_state(core: client.CoreV1Api, name: str) -> Any:
    statuses = core.read_namespaced_pod(name, "default").status.container_statuses or []
    return statuses[0].state if statuses else None


def _wait_state(core: client.CoreV1Api, name: str, which: str, accept: Any = bool) -> Any:
    """The main container's ``state.<which>`` once it is there and ``accept`` takes it."""

    def seen() -> Any:
        state = container_state(core, name)
        got = getattr(state, which) if state is not None else None
        return got if got is not None and accept(got) else None

    return waiting.wait_for(seen, TIMEOUT, interval=0.2, what=f"pod {name} {which}")


def wait_terminated(core: client.CoreV1Api, name: str) -> Any:
    return _wait_state(core, name, "terminated")


def wait_running(core: client.CoreV1Api, name: str) -> Any:
    return _wait_state(core, name, "running")


def wait_waiting_reason(core: client.CoreV1Api, name: str, reasons: tuple[str, ...]) -> str:
    return str(_wait_state(core, name, "waiting", lambda w: w.reason in reasons).reason)
