"""A collection's objects as they change, for a benchmark to time or check: the product's
informer (:class:`core.kube.Informer`: it resumes a cut watch from the last revision seen,
lists again on 410 Gone or any failure, and never ends on an error), handing each object to
the owner under one condition the owner waits on.

The owner's ``seen(obj, deleted)`` runs for every object of a listing and every event, with
the condition held, and the condition is notified after; ``relisted(objs)``, when given, runs
after each listing's objects were seen (to mark what vanished while no watch ran). Times an
owner stamps are the moments the objects reach this process: the watch's delivery counts, so
a figure is never less than the truth.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.backoff import Backoff

if TYPE_CHECKING:
    from core.kube import KubeAdapter

Seen = Callable[[dict[str, Any], bool], None]
Relisted = Callable[[list[dict[str, Any]]], None]


def pods_path(namespace: str | None = None) -> str:
    """The pods of ``namespace``, or of every namespace."""
    return f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"


class Watch:
    """List + watch of the collection at ``path`` (narrowed by ``query``) until :meth:`stop`.

    ``kube``: an adapter of :mod:`core.kube` the owner holds, or a kubeconfig to connect with
    (closed on :meth:`stop`). ``lock``: the lock the condition is made on (an owner whose
    records other threads change passes its own, so that one lock guards them).
    """

    def __init__(
        self,
        kube: KubeAdapter | Path,
        path: str,
        *,
        seen: Seen,
        relisted: Relisted | None = None,
        query: Sequence[tuple[str, str]] = (),
        name: str = "watch",
        lock: threading.Lock | threading.RLock | None = None,
        backoff: Backoff | None = None,
        watch_timeout_s: int = 60,
        read_timeout_s: float = 30.0,
    ) -> None:
        from core.kube import Informer, KubeConnection, connect

        self._owned = isinstance(kube, Path)
        self.kube: KubeAdapter = (
            connect(KubeConnection(kubeconfig=kube, read_timeout_s=read_timeout_s)) if isinstance(kube, Path) else kube
        )
        self.cond = threading.Condition(lock)
        self._seen = seen
        self._relisted = relisted
        self.informer = Informer(
            self.kube,
            path,
            query=query,
            name=name,
            on_list=self._listed,
            on_event=lambda kind, obj: self._event(obj, kind == "DELETED"),
            backoff=backoff,
            watch_timeout_s=watch_timeout_s,
        )

    @property
    def relists(self) -> int:
        return self.informer.relists

    @property
    def expired(self) -> int:
        """Watches that met 410 Gone (resumed from a compacted revision)."""
        return self.informer.expired

    def start(self) -> Watch:
        self.informer.start()
        return self

    def stop(self) -> None:
        self.informer.stop()
        if self._owned:
            self.kube.close()

    def wait(self, done: Callable[[], Any], timeout: float, what: str) -> None:
        """Until ``done()`` (asked with the condition held, again after each change) is true;
        ``TimeoutError`` after ``timeout`` seconds."""
        with self.cond:
            if not self.cond.wait_for(done, timeout):
                raise TimeoutError(f"{what}: not within {timeout:.0f}s")

    def _listed(self, objs: list[dict[str, Any]]) -> None:
        with self.cond:
            for obj in objs:
                self._seen(obj, False)
            if self._relisted is not None:
                self._relisted(objs)
            self.cond.notify_all()

    def _event(self, obj: dict[str, Any], deleted: bool) -> None:
        with self.cond:
            self._seen(obj, deleted)
            self.cond.notify_all()
