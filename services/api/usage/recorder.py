"""The worker's side of usage: every pod the worker sees (watch event or relist) opens or
ends its run's record, from the pod's own timestamps.

The GPU model comes from the node's ``nvidia.com/gpu.product`` label, which NVIDIA's GPU
Feature Discovery sets (https://github.com/NVIDIA/k8s-device-plugin/tree/main/docs/gpu-feature-discovery);
the nodes are listed at most once per ``NODE_REFRESH`` seconds, on a miss.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime
from typing import Any

from sqlalchemy import Engine
from sqlmodel import Session

from core.kube import KubeError
from services.api.domain.models import Container, _as_utc, utcnow
from services.api.domain.pods import _time
from services.api.kube import Kube
from services.api.usage import records

log = logging.getLogger(__name__)

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
NODE_REFRESH = 30.0


class Recorder:
    def __init__(self, *, engine: Engine, kube: Kube, gpu_resource: str) -> None:
        self.engine = engine
        self.kube = kube
        self.gpu_resource = gpu_resource
        self._models: dict[str, str | None] = {}
        self._listed_at: float | None = None
        self._lock = threading.Lock()

    def gpu_model(self, node: str | None) -> str | None:
        if not node:
            return None
        with self._lock:
            due = self._listed_at is None or time.monotonic() - self._listed_at >= NODE_REFRESH
            if node not in self._models and due:
                self._listed_at = time.monotonic()
                try:
                    nodes = self.kube.list_nodes()
                except KubeError as exc:
                    log.info("GPU models unknown for now (%s)", exc)
                    return None
                self._models = {
                    n["metadata"]["name"]: ((n["metadata"].get("labels") or {}).get(GPU_PRODUCT_LABEL)) for n in nodes
                }
            return self._models.get(node)

    def observe(self, pod: dict[str, Any], *, deleted: bool, row: Container | None = None) -> None:
        """Open the run's record once its container has started; end it once it has finished
        (or, for a pod deleted before saying so, at its deletion). ``row``: the container's
        row when the caller has just read it (its GPUs, class and tenancy's deletion are what
        is read of it); read here otherwise."""
        run = records.run_of_pod(pod, self.gpu_resource)
        if run is None or run.started_at is None:
            return  # not started: nothing used yet (queued, scheduling, pulling, waiting for a partition)
        with Session(self.engine) as session:
            if row is None or row.id != run.container_id:
                row = session.get(Container, run.container_id)
            gpus = run.gpus
            if gpus is None:  # DRA pods name no extended resource: the submission says
                gpus = row.gpus if row is not None else 0
            deleted_at = row.tenancy_deleted_at if row is not None else None
            if records.open_run(
                session,
                run=run,
                gpus=gpus,
                gpu_model=self.gpu_model(run.node_name),
                tenancy_deleted_at=deleted_at,
                interruptible=row is not None and row.interruptible,
            ):
                log.info(
                    "usage: container %s tenancy %s started at %s on %s (%d GPUs)",
                    run.container_id,
                    run.tenancy,
                    run.started_at.isoformat(),
                    run.node_name or "-",
                    gpus,
                )
            if run.finished_at is not None:
                self._close(session, run.container_id, run.finished_at, records.END_POD, run=run.run)
            elif deleted:
                when = _time((pod.get("metadata") or {}).get("deletionTimestamp"))
                end = min(when, utcnow()) if when else utcnow()
                self._close(session, run.container_id, end, records.END_DELETED, run=run.run)

    def pod_deleted(self, container_id: str, *, when: datetime) -> None:
        """The worker has just deleted the run's pod (a cancellation): end the open run at
        ``when``, as the watch's DELETED event would. The watch may be down (kube-apiserver
        restarting) and miss the pod's last states; the next relist would only find it gone
        and charge it up to then. The pod's own end, if the watch sees it, still replaces this."""
        with Session(self.engine) as session:
            for row in records.open_runs(session, container_id):  # its current run, if it started
                self._close(session, container_id, when, records.END_DELETED, run=row.run)

    def close_vanished(self, *, present: set[str], before: datetime) -> None:
        """After a relist taken at ``before``: end the open runs whose pod is gone (it was
        deleted while the worker was not watching; its own end time is lost with it)."""
        with Session(self.engine) as session:
            for row in records.open_runs(session):
                started = _as_utc(row.started_at)
                if row.container_id not in present and started is not None and started < before:
                    self._close(session, row.container_id, before, records.END_VANISHED, run=row.run)

    @staticmethod
    def _close(session: Session, container_id: str, when: datetime, source: str, *, run: int) -> None:
        seconds = records.close_run(session, container_id=container_id, finished_at=when, source=source, run=run)
        if seconds is not None:
            log.info(
                "usage: container %s run %d ended at %s (%s): %.1f GPU-seconds",
                container_id,
                run,
                when.isoformat(),
                source,
                seconds,
            )
