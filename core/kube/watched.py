"""The objects of a collection by name, as one :class:`~core.kube.Informer` last saw them.

An owner that reads a collection on every pass (a node's GPU leases each lease round, the
Tenancies before each tenancy's pods) reads this copy instead: no request of kube-apiserver.
The copy may lag the cluster by an event, as any informer's does; an owner that writes what
it read guards the write with the object's ``resourceVersion`` (a stale copy then meets
``409 Conflict``, as a read made a moment earlier would). While no watch stream is open
(refused, cut, not listed yet) :meth:`WatchedObjects.objects` answers None: the copy may be
old then, and the owner reads from Kubernetes as it would without it.

An owner that reads its own writes back through the copy tells it what it wrote
(:meth:`WatchedObjects.wrote`): until the watch brings that version, the copy answers the
written object. A watch sends an object's versions in order, so before that event the held
version is older than the write; an owner's next pass therefore never acts on the state its
own last write replaced (a GPU lease checked twice, a step taken on a superseded state).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .adapters import KubeAdapter
from .informer import Informer

#: versions remembered per object: more than one owner's writes can pass between two reads
_SEEN = 8


def _version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


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
        #: objects the owner wrote whose version the watch has not brought yet, by name
        self._written: dict[str, dict[str, Any]] = {}
        #: the last versions the watch brought, by name (a write reported after its own event
        #: is already in the copy, or superseded)
        self._seen: dict[str, deque[str]] = {}
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
        """The object as last seen or written (None: not held); None too while no watch is open."""
        if not self.watching:
            return None
        with self._lock:
            return self._written.get(name) or self._held.get(name)

    def objects(self) -> list[dict[str, Any]] | None:
        """Every object held (an owner's unseen write in place of what it replaced), or None
        while no watch is open (read the collection instead)."""
        if not self.watching:
            return None
        with self._lock:
            return [self._written.get(name) or obj for name, obj in self._held.items()]

    def wrote(self, obj: Mapping[str, Any]) -> None:
        """The owner wrote ``obj`` (as kube-apiserver answered the write): answer it until the
        watch brings this version. An object the watch already brought is ignored."""
        meta = obj.get("metadata") or {}
        name, version = meta.get("name"), meta.get("resourceVersion")
        if not name or not version:
            return
        with self._lock:
            if name in self._held and version not in self._seen.get(name, ()):
                self._written[name] = dict(obj)

    def forget(self, name: str) -> None:
        """Drop the owner's unseen write of ``name`` (a later write of it met a conflict: the
        object moved on without this owner, and the watch's copy says where)."""
        with self._lock:
            self._written.pop(name, None)

    def _listed(self, items: list[dict[str, Any]]) -> None:
        with self._lock:
            self._held = {o["metadata"]["name"]: o for o in items if (o.get("metadata") or {}).get("name")}
            self._written.clear()
            self._seen = {name: deque([_version(o)], maxlen=_SEEN) for name, o in self._held.items()}
        self._changed()

    def _watched(self, kind: str, obj: dict[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name")
        if not name:
            return
        version = _version(obj)
        with self._lock:
            if kind == "DELETED":
                self._held.pop(name, None)
                self._written.pop(name, None)
                self._seen.pop(name, None)
            else:
                self._held[name] = obj
                self._seen.setdefault(name, deque(maxlen=_SEEN)).append(version)
                if _version(self._written.get(name) or {}) == version:
                    del self._written[name]
        self._changed()

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change()
