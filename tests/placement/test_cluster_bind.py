"""The extender's Kubernetes side on the local cluster or (``KUBECONFIG`` set) on a real cluster:
it lists and watches FabricStates, and binds a pod through ``pods/binding``.

On a real cluster it uses a real Node (its first), creates its FabricState and pod under
unique names, and removes them; the project's CRDs must be installed there
(docs/real-cluster-tests.md).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from core import crds
from core.kube import Conflict, Kube, NotFound, new_api_client
from devtools.local_cluster.objects import create_all
from devtools.waiting import wait_for
from services.placement.extender import BindingArgs
from services.placement.fleet import FleetIndex
from services.placement.kube import FleetWatcher
from tests.placement.factories import fabric_status

#: the chart's component label of the extender's ServiceAccount and RBAC
EXTENDER_COMPONENT = "scheduler-extender"


@pytest.mark.cluster
def test_the_extender_sees_the_fabric_and_binds(
    k8s: Any, on_real_cluster: bool, unique_name: Callable[[str], str]
) -> None:
    kube = Kube.of(k8s)
    _sees_the_fabric_and_binds(kube, kube, on_real_cluster, unique_name)


@pytest.mark.cluster
def test_the_extender_binds_with_the_charts_service_account_alone(
    k8s: Any, kubeconfig: Path, on_real_cluster: bool, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """The chart's RBAC grants what the extender's Kubernetes side does: with a token of the
    chart's ServiceAccount, bound by its ClusterRole and nothing else, the extender lists and
    watches the FabricStates and binds a pod (the test above runs as the admin, whom nothing
    is refused: a Binding posted where the ClusterRole does not reach passes there)."""
    from devtools.sandbox import identities
    from gpucaas import chart

    if on_real_cluster:
        pytest.skip("applies the chart's ClusterRole and its binding under their own names: the local cluster only")
    mine = [
        o
        for o in identities.cluster_side(identities.SANDBOX_VALUES)
        if o["kind"] == "Namespace" or chart.component(o) == EXTENDER_COMPONENT
    ]
    assert {o["kind"] for o in mine} >= {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}
    create_all(kubeconfig, mine)  # as the sandbox installs the chart's cluster side
    (account,) = [o for o in mine if o["kind"] == "ServiceAccount"]
    namespace, name = account["metadata"]["namespace"], account["metadata"]["name"]
    token = identities.mint_token(kubeconfig, namespace, name)
    own = identities.write_kubeconfig(
        kubeconfig, tmp_path / "extender.kubeconfig", f"system:serviceaccount:{namespace}:{name}", token
    )
    with new_api_client(own) as api:
        _sees_the_fabric_and_binds(Kube.of(k8s), Kube.of(api), on_real_cluster, unique_name)


def _sees_the_fabric_and_binds(kube: Kube, ext: Kube, on_real_cluster: bool, unique_name: Callable[[str], str]) -> None:
    """``kube`` (the admin) makes a node's FabricState and a pod no scheduler picks; the
    extender's side, on ``ext``'s credentials, sees the node in its index and binds the pod."""
    nodes = kube.json(kube.core.list_node)["items"]
    if nodes:
        node = nodes[0]["metadata"]["name"]
    else:  # the local cluster starts without nodes: register one, as a kubelet would
        assert not on_real_cluster
        node = "gpu-node-a"
        kube.call(kube.core.create_node, {"metadata": {"name": node}})
    namespace = unique_name("placement-e2e")
    pod_name = unique_name("bind-me")
    kube.call(kube.core.create_namespace, {"metadata": {"name": namespace}})
    made_fabric_state = False
    watcher = FleetWatcher(ext, FleetIndex(), watch_timeout_seconds=5, retry_seconds=0.2)
    watcher.start()
    try:
        assert watcher.wait_synced(60)
        body = {
            "apiVersion": crds.API_VERSION,
            "kind": "FabricState",
            "metadata": {"name": node},
            "spec": {"node": node},
        }
        try:
            kube.call(kube.custom.create_cluster_custom_object, crds.GROUP, crds.VERSION, crds.FABRICSTATE_PLURAL, body)
            made_fabric_state = True
        except Conflict:  # a real cluster may have it already (the fabric service writes it)
            pass
        stamp = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        kube.call(
            kube.custom.patch_cluster_custom_object_status,
            crds.GROUP,
            crds.VERSION,
            crds.FABRICSTATE_PLURAL,
            node,
            {"status": fabric_status(updated_at=stamp)},
        )
        wait_for(lambda: watcher.index.node(node), 60, what=f"FabricState {node} in the fleet index")

        # a pod no scheduler picks up (unknown schedulerName): the extender's bind places it
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod_name, "namespace": namespace},
            "spec": {
                "schedulerName": "gpucaas-test-nobody",
                "restartPolicy": "Never",
                "securityContext": {
                    "runAsNonRoot": True,
                    "runAsUser": 65532,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "containers": [
                    {
                        "name": "pause",
                        "image": "registry.k8s.io/pause:3.9",
                        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                    }
                ],
            },
        }
        created = kube.call(kube.core.create_namespaced_pod, namespace, pod)
        watcher.bind(BindingArgs(pod_name, namespace, created.metadata.uid, node))
        bound = kube.json(kube.core.read_namespaced_pod, pod_name, namespace)
        assert bound["spec"]["nodeName"] == node
    finally:
        watcher.stop()
        try:
            kube.call(kube.core.delete_namespace, namespace)
        except NotFound:
            pass
        if on_real_cluster and made_fabric_state:
            try:  # only a FabricState this test made; one the fabric service wrote stays
                kube.call(
                    kube.custom.delete_cluster_custom_object, crds.GROUP, crds.VERSION, crds.FABRICSTATE_PLURAL, node
                )
            except NotFound:
                pass


@pytest.mark.cluster
def test_gpus_freed_on_a_node_are_announced_to_kube_scheduler_on_the_node(k8s: Any, on_real_cluster: bool) -> None:
    """kube-scheduler does not watch FabricStates or GPULeases: a pod the extender refused while
    a node's GPUs were still held would wait for an unrelated event (or five minutes). When a
    node's free GPUs grow, the extender touches an annotation of the Node, which is such an
    event (the chaos soak met 8-GPU pods Pending minutes after both boards were free)."""
    from services.placement.kube import NUDGE_ANNOTATION

    if on_real_cluster:
        pytest.skip("annotates a Node: the local cluster's own only")
    kube = Kube.of(k8s)
    node = "gpu-node-nudge"
    try:
        kube.call(kube.core.create_node, {"metadata": {"name": node}})
    except Conflict:
        pass
    body = {"apiVersion": crds.API_VERSION, "kind": "FabricState", "metadata": {"name": node}, "spec": {"node": node}}
    try:
        kube.call(kube.custom.create_cluster_custom_object, crds.GROUP, crds.VERSION, crds.FABRICSTATE_PLURAL, body)
    except Conflict:
        pass

    def publish(active: dict[int, str | None]) -> None:
        stamp = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        kube.call(
            kube.custom.patch_cluster_custom_object_status,
            crds.GROUP,
            crds.VERSION,
            crds.FABRICSTATE_PLURAL,
            node,
            {"status": fabric_status(active=active, updated_at=stamp)},
        )

    def annotation() -> str | None:
        got = kube.json(kube.core.read_node, node)
        return ((got.get("metadata") or {}).get("annotations") or {}).get(NUDGE_ANNOTATION)

    publish({3: "gpus:held"})  # the pair {1, 3} held
    watcher = FleetWatcher(kube, FleetIndex(), watch_timeout_seconds=5, retry_seconds=0.2, nudge_nodes=True)
    watcher.start()
    try:
        assert watcher.wait_synced(60)
        wait_for(
            lambda: (n := watcher.index.node(node)) is not None and n.free_mask != 0xFF,
            60,
            what="the held pair in the fleet index",
        )
        before = annotation()
        publish({})  # released: two GPUs more are free
        stamped = wait_for(lambda: (a := annotation()) != before and a, 30, what="the Node annotated")
        assert stamped.endswith("Z") and watcher.nudges >= 1
        publish({3: "gpus:held-again"})  # GPUs taken: no announcement
        wait_for(lambda: watcher.index.node(node).free_mask != 0xFF, 30, what="the pair held again")
        assert annotation() == stamped
    finally:
        watcher.stop()
        for delete in (
            lambda: kube.call(
                kube.custom.delete_cluster_custom_object, crds.GROUP, crds.VERSION, crds.FABRICSTATE_PLURAL, node
            ),
            lambda: kube.call(kube.core.delete_node, node),
        ):
            try:
                delete()
            except NotFound:
                pass
