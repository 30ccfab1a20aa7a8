"""An Event on every pod a real sandbox node runs under the Kata RuntimeClass, saying that no VM boots.

The pod spec and RuntimeClass are production's; only this node's containerd maps the
``kata-qemu-nvidia-gpu`` handler to runc. The tenant reads the container's timeline
(``GET /v1/containers/{id}/events``) from the pod's Events, so that is where it is said.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from pathlib import Path

from kubernetes import client

from core.kube import new_api_client

log = logging.getLogger(__name__)

REASON = "RuntimeWithoutVM"
MESSAGE = (
    "sandbox node {node}: the {handler} handler runs runc here, so the container runs as a plain Linux "
    "container with its GPUs' /dev/vfio nodes; no Kata VM boots on this machine"
)


class RuntimeNotice:
    """Polls the node's pods (admin credentials) and posts the Event once per pod."""

    def __init__(self, kubeconfig: Path, node: str, handler: str, interval: float = 1.0) -> None:
        self.kubeconfig, self.node, self.handler, self.interval = kubeconfig, node, handler, interval
        self._stop = threading.Event()
        self._told: set[str] = set()
        self._thread = threading.Thread(target=self._run, name=f"runtime-notice-{node}", daemon=True)

    def start(self) -> RuntimeNotice:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        with new_api_client(self.kubeconfig) as api:
            core = client.CoreV1Api(api)
            while not self._stop.wait(self.interval):
                try:
                    self.tell(core)
                except Exception as exc:  # noqa: BLE001 (an API server restarting: the next round tells)
                    log.debug("runtime notice on %s: %s", self.node, exc)

    def tell(self, core: client.CoreV1Api) -> None:
        pods = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self.node}").items
        for pod in pods:
            meta, spec = pod.metadata, pod.spec
            if (
                meta is None
                or spec is None
                or meta.uid is None
                or meta.namespace is None
                or meta.uid in self._told
                or spec.runtime_class_name != self.handler
            ):
                continue
            # stamped when the kubelet took the pod, not when this poll saw it: a short container
            # may have ended by then, and its timeline must not say "no VM boots" after "finished"
            when = (pod.status and pod.status.start_time) or meta.creation_timestamp or dt.datetime.now(dt.UTC)
            event = {
                "metadata": {"generateName": f"{meta.name}.", "namespace": meta.namespace},
                "involvedObject": {
                    "kind": "Pod",
                    "apiVersion": "v1",
                    "name": meta.name,
                    "namespace": meta.namespace,
                    "uid": meta.uid,
                },
                "reason": REASON,
                "type": "Normal",
                "message": MESSAGE.format(node=self.node, handler=self.handler),
                "source": {"component": "gpucaas-sandbox", "host": self.node},
                "firstTimestamp": when.isoformat(),
                "lastTimestamp": when.isoformat(),
                "count": 1,
            }
            core.create_namespaced_event(meta.namespace, event)  # type: ignore[arg-type]  # a plain dict body
            self._told.add(meta.uid)
