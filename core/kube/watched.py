"""The objects of a collection by name, as one :class:`~core.kube.Informer` last saw them.

An owner that reads a collection on every pass (a node's GPU leases each lease round, the
Tenancies before each tenancy's pods) reads this copy instead: no request of kube-apiserver.
The copy may lag the cluster by an event, as any informer's does; an owner that writes what
it read guards the write with the object's ``resourceVersion`` (a stale copy then meets
``409 Conflict``, as a read made a moment earlier would). While no watch stream is open
(refused, cut, not listed yet) :meth:`WatchedObjects.objects` answers None: the copy may be
old then, and the owner reads from Kubernetes as it would without it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from .adapters import KubeAdapter
from .informer import Informer


class WatchedObjects:
    """``{name: object}`` of the collection at ``path`` (narrowed by ``query``), kept by one
    informer; ``on_change()`` runs after each listing and event has been taken in."""

    def __init__(
        self,
        kube: KubeAdapter,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        name: str | None = None,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self._held: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._on_change = on_change
        self.informer = Informer(kube, path, query=query, name=name, on_list=self._listed, on_event=self._watched)

    def start(self) -> WatchedObjects:
        self.informer.start()
        return self

    def stop(self, timeout: float | None = 5.0) -> None:
        self.informer.stop(timeout)

    @property
    def watching(self) -> bool:
        """A watch stream is open: the copy is as new as the last event kube-apiserver sent."""
        return self.informer.watching.is_set()

    def get(self, name: str) -> dict[str, Any] | None:
        """The object as last seen (None: not held); None too while no watch is open."""
        if not self.watching:
            return None
        with self._lock:
            return self._held.get(name)

    def objects(self) -> list[dict[str, Any]] | None:
        """Every object held, or None while no watch is open (read the collection instead)."""
        if not self.watching:
            return None
        with self._lock:
            return list(self._held.values())

    def _listed(self, items: list[dict[str, Any]]) -> None:
        with self._lock:
            self._held = {o["metadata"]["name"]: o for o in items if (o.get("metadata") or {}).get("name")}
        self._changed()

    def _watched(self, kind: str, obj: dict[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name")
        if not name:
            return
        with self._lock:
            if kind == "DELETED":
                self._held.pop(name, None)
            else:
                self._held[name] = obj
        self._changed()

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change()
