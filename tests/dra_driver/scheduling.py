"""kube-scheduler allocating the DRA driver's devices: fake GPU nodes, pods with claims.

The cluster (``tests/dra_driver/conftest.py``) runs kube-scheduler with the DRA
configuration; its DynamicResources plugin allocates the claims of pods from the
ResourceSlices the driver's own code publishes. No kubelet runs: a GPU node is a Node
object the admin makes (Ready, allocatable cpu/memory/pods) whose Lease is renewed so that
kube-controller-manager's node lifecycle controller never taints it, and a scheduled pod
stays Pending on it. What a test reads is what kube-scheduler decided: the claim's
``status.allocation`` and the pod's ``spec.nodeName``, or the pod's ``PodScheduled``
condition saying Unschedulable.
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
import threading
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from core import dra
from core.kube import Kube
from core.topology import partition_by_id
from devtools.local_cluster import LocalCluster
from devtools.waiting import WaitTimeout, wait_for
from services.dra_driver.slices import partition_of_device

log = logging.getLogger(__name__)

GROUP, VERSION = "resource.k8s.io", "v1"
LEASE_NAMESPACE = "kube-node-lease"
#: the DynamicResources plugin's Filter verdict when a node's devices cannot satisfy the pod's claims
NO_ALLOCATION = "cannot allocate all claims"
#: well inside kube-controller-manager's --node-monitor-grace-period (50 s)
HEARTBEAT_S = 10.0


def _micro_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Heartbeats:
    """The kubelet's node Lease renewals, for the fake nodes only (one thread for all)."""

    def __init__(self, k8s: client.ApiClient) -> None:
        self.leases = client.CoordinationV1Api(k8s)
        self.nodes: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-node-heartbeats", daemon=True)

    def start(self) -> Heartbeats:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def add(self, node: str, node_uid: str) -> None:
        self.leases.create_namespaced_lease(
            LEASE_NAMESPACE,
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": node,
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}],
                },
                "spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": _micro_now()},
            },
        )
        with self._lock:
            self.nodes.add(node)

    def remove(self, node: str) -> None:
        with self._lock:
            self.nodes.discard(node)

    def _run(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            with self._lock:
                nodes = sorted(self.nodes)
            for node in nodes:
                try:
                    self.leases.patch_namespaced_lease(node, LEASE_NAMESPACE, {"spec": {"renewTime": _micro_now()}})
                except Exception as exc:  # noqa: BLE001 (a node deleted meanwhile; the next round tries again)
                    log.info("lease of %s not renewed: %s", node, exc)


@dataclass
class Scheduling:
    """One test's GPU node and namespace; pods whose claims kube-scheduler allocates there."""

    cluster: LocalCluster
    k8s: client.ApiClient
    heartbeats: Heartbeats
    node: str
    namespace: str

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.k8s)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.k8s)

    @property
    def kube(self) -> Kube:
        return Kube.of(self.k8s)

    # --- set-up ----------------------------------------------------------------------

    def set_up(self) -> Scheduling:
        """The namespace (with a claim template per GPU count) and the Ready node."""
        self.core.create_namespace({"metadata": {"name": self.namespace}})
        for gpus in dra.CLAIM_TEMPLATE_SIZES:
            self.custom.create_namespaced_custom_object(
                GROUP, VERSION, self.namespace, "resourceclaimtemplates", dra.claim_template(gpus, self.namespace)
            )
        self.add_node(self.node)
        return self

    def add_node(self, name: str) -> None:
        """A Ready node with room for pods and nothing else (its GPUs are the driver's slices);
        returns once kube-scheduler may place pods there."""
        node = self.core.create_node(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                    },
                },
            }
        )
        resources = {"cpu": "224", "memory": "2Ti", "hugepages-1Gi": "1800Gi", "pods": "110"}
        self.core.patch_node_status(
            name,
            {
                "status": {
                    "capacity": resources,
                    "allocatable": resources,
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "KubeletReady",
                            "message": "a fake GPU node of the DRA driver's tests",
                            "lastHeartbeatTime": _now(),
                            "lastTransitionTime": _now(),
                        }
                    ],
                    "addresses": [
                        {"type": "InternalIP", "address": "127.0.0.1"},
                        {"type": "Hostname", "address": name},
                    ],
                }
            },
        )
        self.heartbeats.add(name, node.metadata.uid)
        # kube-apiserver's TaintNodesByCondition admission gives a new node the not-ready taint;
        # the node lifecycle controller lifts it once it has seen the node Ready
        wait_for(lambda: not self.core.read_node(name).spec.taints, 60, what=f"node {name} without taints")

    def tear_down(self) -> None:
        """Pods go at once (no kubelet confirms), then the namespace, the node and its slices."""
        for pod in self.core.list_namespaced_pod(self.namespace).items:
            self._delete_pod_now(pod.metadata.name)
        self.core.delete_namespace(self.namespace)
        self.heartbeats.remove(self.node)
        slices = self.custom.list_cluster_custom_object(
            GROUP, VERSION, "resourceslices", field_selector=f"spec.nodeName={self.node}"
        )["items"]
        for s in slices:
            self._ignore_missing(
                self.custom.delete_cluster_custom_object, GROUP, VERSION, "resourceslices", s["metadata"]["name"]
            )
        self._ignore_missing(self.core.delete_node, self.node)

    @staticmethod
    def _ignore_missing(call: Any, *args: Any) -> None:
        try:
            call(*args)
        except ApiException as exc:
            if exc.status != 404:
                raise

    # --- claims and pods -------------------------------------------------------------

    def create_claim(self, name: str, gpus: int) -> dict[str, Any]:
        """A ResourceClaim of its own (it outlives the pods that use it)."""
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": dra.claim_devices(gpus)},
        }
        return dict(self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, "resourceclaims", body))

    def create_pod(
        self, name: str, *, gpus: int | None = None, claim: str | None = None, extended: bool = False
    ) -> str:
        """A pod on this test's node whose claim ``gpus`` comes from the tenant's ResourceClaimTemplate
        (as the API's pods), or is the ResourceClaim ``claim``; ``extended``: it also requests
        ``nvidia.com/gpu: gpus``, as the API's pods queued by Kueue do."""
        assert (gpus is None) != (claim is None)
        resources: dict[str, Any] = {"claims": [{"name": dra.POD_CLAIM_NAME}]}
        if extended:
            resources["limits"] = {"nvidia.com/gpu": str(gpus)}
        source = (
            {"resourceClaimTemplateName": dra.claim_template_name(gpus)}
            if gpus is not None
            else {"resourceClaimName": claim}
        )
        self.core.create_namespaced_pod(
            self.namespace,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": self.node},
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": resources,
                        }
                    ],
                    "resourceClaims": [{"name": dra.POD_CLAIM_NAME, **source}],
                },
            },
        )
        return name

    def claim_name(self, pod: str) -> str | None:
        """The pod's ResourceClaim: the one it names, or the one made from its template."""
        p = self.core.read_namespaced_pod(pod, self.namespace)
        (ref,) = p.spec.resource_claims
        if ref.resource_claim_name:
            return str(ref.resource_claim_name)
        for status in (p.status.resource_claim_statuses or []) if p.status else []:
            if status.name == ref.name and status.resource_claim_name:
                return str(status.resource_claim_name)
        return None

    def claim(self, name: str) -> dict[str, Any] | None:
        try:
            return dict(
                self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "resourceclaims", name)
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def allocated(self, pod: str, timeout: float = 60.0) -> dict[str, Any]:
        """The pod's claim once kube-scheduler has written its allocation."""

        def got() -> dict[str, Any] | None:
            name = self.claim_name(pod)
            c = self.claim(name) if name else None
            return c if c and (c.get("status") or {}).get("allocation") else None

        return wait_for(got, timeout, what=f"kube-scheduler to allocate the claim of pod {pod}")  # type: ignore[no-any-return]

    def bound(self, pod: str, timeout: float = 60.0) -> str:
        """The node kube-scheduler bound ``pod`` to."""
        try:
            return wait_for(
                lambda: self.core.read_namespaced_pod(pod, self.namespace).spec.node_name,  # type: ignore[no-any-return]
                timeout,
                what=f"kube-scheduler to bind pod {pod}",
            )
        except WaitTimeout as exc:
            raise WaitTimeout(f"{exc}; kube-scheduler says: {self.verdict(pod)}") from None

    def scheduled(self, pod: str, timeout: float = 60.0) -> dict[str, Any]:
        """Bound to this test's node, its claim allocated and reserved for it: the claim."""
        assert self.bound(pod, timeout) == self.node
        claim = self.allocated(pod, timeout)
        uid = self.core.read_namespaced_pod(pod, self.namespace).metadata.uid
        assert [r["uid"] for r in claim["status"].get("reservedFor") or []] == [uid]
        return claim

    def verdict(self, pod: str) -> str | None:
        """The message of the pod's ``PodScheduled`` condition while it is False (kube-scheduler's reasons)."""
        p = self.core.read_namespaced_pod(pod, self.namespace)
        for c in (p.status.conditions or []) if p.status else []:
            if c.type == "PodScheduled" and c.status == "False":
                return f"{c.reason}: {c.message}"
        return None

    def unschedulable(self, pod: str, timeout: float = 60.0) -> str:
        """Waits until kube-scheduler found that the pod's claim cannot be allocated on any node
        (not a passing reason, such as its claim not made from the template yet); checks it is
        neither bound nor allocated and returns the message."""
        message: str = wait_for(
            lambda: (v := self.verdict(pod)) and NO_ALLOCATION in v and v,
            timeout,
            what=f"kube-scheduler to find no allocation for pod {pod}",
        )
        assert not self.core.read_namespaced_pod(pod, self.namespace).spec.node_name
        name = self.claim_name(pod)
        c = self.claim(name) if name else None
        assert c is None or not (c.get("status") or {}).get("allocation"), c
        return message

    def delete_pod(self, pod: str, timeout: float = 60.0) -> None:
        """The pod goes (no kubelet to wait for); returns once its claim no longer holds devices:
        a claim from its template is deleted, a claim of its own deallocated
        (kube-controller-manager's resourceclaim controller)."""
        claim = self.claim_name(pod)
        own = self.core.read_namespaced_pod(pod, self.namespace).spec.resource_claims[0].resource_claim_name
        self._delete_pod_now(pod)
        if claim is None:
            return
        if own:
            wait_for(
                lambda: not ((self.claim(claim) or {}).get("status") or {}).get("allocation"),
                timeout,
                what=f"claim {claim} deallocated",
            )
        else:
            wait_for(lambda: self.claim(claim) is None, timeout, what=f"claim {claim} deleted")

    def _delete_pod_now(self, pod: str) -> None:
        self._ignore_missing(lambda: self.core.delete_namespaced_pod(pod, self.namespace, grace_period_seconds=0))


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


def results(claim: dict[str, Any]) -> list[dict[str, Any]]:
    return list(((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or [])


def gpus_of_claim(claim: dict[str, Any]) -> list[frozenset[int]]:
    """The GPU set of each device allocated to ``claim`` (partition ids from the device names)."""
    return [partition_by_id(partition_of_device(r["device"])).gpus for r in results(claim)]


def claim_gpus(claim: dict[str, Any]) -> frozenset[int]:
    """The GPUs allocated to ``claim``, all its devices together."""
    return frozenset().union(*gpus_of_claim(claim))
