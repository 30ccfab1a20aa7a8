"""One real node (containerd 2, runc, the pinned kubelet) on a cluster of its own, with the local registries.

Module-scoped: starting a node takes a few seconds, and each test makes pods of its own.
"""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
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
    #: that copy, with its eStargz copy
    image_layout: big_image.Layout


@contextmanager
def started_node(base: Path, *, lazy_pull: bool = False, run_scheduler: bool = False) -> Iterator[Node]:
    """A cluster, the registries, the far registry with a small copy of the big image (and its
    eStargz copy), and the node, under ``base``; all stopped after. Pods name their node
    themselves unless ``run_scheduler`` (a DaemonSet's pods need kube-scheduler)."""
    missing = node_tools_missing()
    assert not missing, f"a real node needs: {', '.join(missing)} (make install adds the packages)"
    cluster = LocalCluster(
        base / "cluster", ClusterOptions(unsafe_no_fsync=True, run_scheduler=run_scheduler, audit_policy=None)
    ).start()
    registries = node = link = None
    try:
        registries = Registries(base / "registries").start()
        link = SlowLink(base / "link", base / "far-registry").start()
        layout = big_image.add_estargz(big_image.write_layout(base / "big-image", scale=SMALL), cluster.bin_dir)
        for reference in (big_image.REFERENCE, big_image.LAZY_REFERENCE):
            _, repository, tag = images.split(reference)
            images.push(layout.path, images.Image(repository, tag), link.address)
        mirrors = {**registries.mirrors(), images.split(big_image.REFERENCE)[0]: link.address}
        dev_root = base / "dev"
        options = NodeOptions(NODE, cdi_dirs=(base / "cdi",), mirrors=mirrors, lazy_pull=lazy_pull)
        node = RealNode(base / "node", cluster, options).start()
        api = new_api_client(cluster.admin_kubeconfig)
        core = client.CoreV1Api(api)
        waiting.wait_for(lambda: _default_account(core), TIMEOUT, interval=0.2, what="ServiceAccount default")
        yield Node(cluster, node, registries, core, dev_root, link, layout)
        api.close()
    finally:
        if node is not None:
            node.stop()
        if link is not None:
            link.stop()
        if registries is not None:
            registries.stop()
        cluster.stop()


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    with started_node(tmp_path_factory.mktemp("real-node")) as node:
        yield node


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
    pull: str | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": image,
        **({"imagePullPolicy": pull} if pull else {}),
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


def ctr(node: Node, *args: str) -> list[str]:
    """What ``ctr`` on the node's containerd (namespace ``k8s.io``, the CRI's) prints, as words."""
    address = ["--address", str(node.node.containerd_socket), "-n", "k8s.io"]
    out = subprocess.run(
        [str(node.cluster.bin_dir / "ctr"), *address, *args], check=True, capture_output=True, text=True
    )
    return out.stdout.split()


def make_pull_secret(core: client.CoreV1Api, name: str, registries: Registries) -> None:
    """A ``kubernetes.io/dockerconfigjson`` Secret with the private registry's user and password."""
    info = registries.info()
    config = {"auths": {info["server"]: {"username": info["username"], "password": info["password"]}}}
    core.create_namespaced_secret(
        "default",
        {
            "metadata": {"name": name},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()},
        },
    )


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
