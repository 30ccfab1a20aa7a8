"""The Tenancy resources as the submission worker last saw them: one list + watch instead of a
read of the tenancy's resource before each tenancy's pods.

Before it makes a tenancy's pods, the worker must know that the tenancy's resource holds the
database's record (its spec at the record's revision) and that the controller has made it
``Ready``. Reading the resource for that cost a request of kube-apiserver per tenancy and pass,
on the path of every container, and one every :data:`~services.api.worker.TENANCY_READY_POLL`
while a new tenancy was being made ready. The watch answers both from memory; a resource the
watch does not hold in step with the record (not listed yet, behind the record, Kubernetes not
answering) is still pushed and read as before (:func:`~services.api.worker.push_tenancy`), so
the watch only ever saves requests: it decides nothing the resource read would decide otherwise.

The watch may lag the cluster by an event: a resource it says is ``Ready`` may have changed a
moment ago. A read has the same race (the resource can change just after it); a pod made then
fails or waits as it would have, and the worker's own retries carry the container on.
"""

from __future__ import annotations

from typing import Any

from core import crds
from core.kube import KubeAdapter, WatchedObjects
from services.api.kube import tenancy_in_step

PATH = f"/apis/{crds.GROUP}/{crds.VERSION}/{crds.TENANCY_PLURAL}"


class TenancyWatch:
    """Every Tenancy by name, kept by a :class:`~core.kube.WatchedObjects` of their collection."""

    def __init__(self, kube: KubeAdapter) -> None:
        self._tenancies = WatchedObjects(kube, PATH, name="tenancy watch")

    def start(self) -> TenancyWatch:
        self._tenancies.start()
        return self

    def stop(self, timeout: float | None = 5.0) -> None:
        self._tenancies.stop(timeout)

    def in_step(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The resource as watched, if it needs no write to be ``body`` (a Tenancy as
        :func:`~services.api.domain.pods.build_tenancy` makes it); else None: push it. None too
        while the watch is not open, as its copy may be old then."""
        held = self._tenancies.get(body["metadata"]["name"])
        return held if held is not None and tenancy_in_step(held, body) else None
