"""The one informer: list a collection, watch it from the listing, and never stop until told.

Like client-go's reflector (``k8s.io/client-go/tools/cache/reflector.go``) and Kopf's
watchers, :class:`Informer` lists the collection at ``path`` (``on_list(items)``: the whole
state), then watches from the listing's resourceVersion with bookmarks
(``on_event(type, object)`` for each ADDED, MODIFIED and DELETED), and:

* a watch the server ends (``timeoutSeconds``) is opened again from the last
  resourceVersion seen, at once;
* a failed list, a refused or cut watch (Kubernetes unreachable, 5xx, 403) waits the one
  :class:`~core.backoff.Backoff` and tries again, the watch from the last resourceVersion
  (nothing missed, nothing listed twice), the list from scratch;
* 410 Gone (the resourceVersion was compacted away) lists again at once;
* anything else — a handler raising, say — is logged with its traceback and lists again
  after the backoff: the state the handler left may be wrong, and a fresh listing repairs it.

``before_list()``, when given, runs before each list request, the first and every one after
(a 410, a failed handler): an owner that reconciles against the listing (fails what vanished
while nobody watched) notes there when the listing began, so that what changes after the
request is not taken for gone.

It ends only when :meth:`stop` is called (which also cuts a stream blocked on a quiet
collection), never on an error.

It reads the wire JSON over either adapter (:class:`~core.kube.RestKube` or
:class:`~core.kube.Kube`, through their ``request`` and ``stream``), rather than the
official client's ``watch.Watch``: one code path serves node daemons that must not load the
official client and services that hold it; no model object is built and undone per event
(a pod's model cost the scheduler extender a tenth of its CPU); and ``Watch`` hides what an
informer must see (it swallows one 410 and retries the same resourceVersion, and cannot be
interrupted while blocked in a read).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import urllib3

from core.backoff import Backoff

from .adapters import KubeAdapter
from .errors import Gone, KubeError, Unavailable, from_status
from .rest import stream_lines

log = logging.getLogger(__name__)

#: list failed, watch refused or cut: 0.5 s doubling to 30 s, jittered
DEFAULT_BACKOFF = Backoff(initial_s=0.5, max_s=30.0, jitter=0.5)

OnList = Callable[[list[dict[str, Any]]], None]
OnEvent = Callable[[str, dict[str, Any]], None]


class Informer:
    """List + watch of the collection at ``path`` (e.g. ``/api/v1/pods``), handing its owner the
    listings (``on_list``) and events (``on_event``) in one thread, until :meth:`stop`.

    ``query`` narrows the collection (``labelSelector``, ``fieldSelector``). ``on_error`` sees
    each :class:`KubeError` of a list or watch and may answer the seconds to wait instead of the
    backoff's. ``synced`` is set once a listing has been handed over, ``watching`` while a watch
    stream is open (an owner may poll instead while it is not); ``relists``, ``expired`` (410
    Gone) and ``failures`` count what happened.
    """

    def __init__(
        self,
        kube: KubeAdapter,
        path: str,
        *,
        on_list: OnList,
        on_event: OnEvent,
        query: Sequence[tuple[str, str]] = (),
        name: str | None = None,
        backoff: Backoff | None = None,
        watch_timeout_s: int = 300,
        on_error: Callable[[KubeError], float | None] | None = None,
        before_list: Callable[[], None] | None = None,
    ) -> None:
        self.kube = kube
        self.path = path
        self.query = list(query)
        self.name = name or path
        self.on_list = on_list
        self.on_event = on_event
        self.on_error = on_error
        self.before_list = before_list
        self.backoff = backoff or dataclasses.replace(DEFAULT_BACKOFF)
        self.watch_timeout_s = watch_timeout_s
        self.synced = threading.Event()
        self.watching = threading.Event()
        self.relists = 0
        self.expired = 0
        self.failures = 0
        self._stop = threading.Event()
        self._resp: Any = None
        self._resp_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> Informer:
        """Run in a daemon thread of its own."""
        self._thread = threading.Thread(target=self.run, name=f"informer {self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float | None = 5.0) -> None:
        """End the loop, cutting an open watch; wait up to ``timeout`` for its thread."""
        self._stop.set()
        self._cut()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def run(self) -> None:
        """The loop (see the module docstring); returns only once stopped."""
        rv: str | None = None
        while not self._stop.is_set():
            try:
                if rv is None:
                    rv = self._list()
                if not self._stop.is_set():
                    rv = self._watch(rv)
            except Gone as exc:
                self.expired += 1
                log.info("%s: %s; listing again", self.name, exc.summary())
                rv = None
            except KubeError as exc:
                if self._stop.is_set():
                    return
                self.failures += 1
                wait = self.on_error(exc) if self.on_error is not None else None
                wait = self.backoff.next() if wait is None else wait
                log.warning("%s: list/watch failed (%s); again in %.1fs", self.name, exc.summary(), wait)
                self._stop.wait(wait)
            except Exception:  # a handler's failure (_HandlerFailed) or a bug: said, then listed again
                if self._stop.is_set():
                    return
                self.failures += 1
                wait = self.backoff.next()
                log.exception("%s: failed; listing again in %.1fs", self.name, wait)
                rv = None
                self._stop.wait(wait)

    # -- list and watch --------------------------------------------------------------

    def _list(self) -> str:
        if self.before_list is not None:
            self._handle(self.before_list)
        listing = self.kube.request("GET", self.path, query=self.query or None)
        items = list(listing.get("items") or [])
        if self._stop.is_set():
            return ""
        self._handle(self.on_list, items)
        self.relists += 1
        self.synced.set()
        self.backoff.reset()
        rv = str((listing.get("metadata") or {}).get("resourceVersion") or "")
        log.debug("%s: listed %d (resourceVersion %s)", self.name, len(items), rv)
        return rv

    def _watch(self, rv: str) -> str:
        """Watch from ``rv`` until the server ends the stream; the last resourceVersion seen."""
        query = [
            *self.query,
            ("watch", "1"),
            ("resourceVersion", rv),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(self.watch_timeout_s)),
        ]
        resp = self.kube.stream(self.path, query=query, read_timeout_s=self.watch_timeout_s + 30)
        with self._resp_lock:
            self._resp = resp
        self.watching.set()
        ended = False
        try:
            self.backoff.reset()
            lines = stream_lines(resp, 65536)
            while not self._stop.is_set():
                try:
                    line = next(lines, None)
                    event = json.loads(line) if line is not None else None
                except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:  # cut mid-read, or torn
                    if self._stop.is_set():
                        break
                    raise Unavailable(f"watch {self.name} cut: {exc}", server=self.kube.server) from exc
                if event is None:
                    ended = True
                    break  # the server's timeoutSeconds: watch again from rv
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":  # a Status in the stream: 410 Gone when rv is too old
                    raise from_status(obj.get("code"), obj, what=f"watch {self.name}", server=self.kube.server)
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                if kind != "BOOKMARK":
                    self._handle(self.on_event, str(kind), obj)
        finally:
            self.watching.clear()
            with self._resp_lock:
                self._resp = None
            if not ended:
                # left mid-stream (stopped, cut, or a handler raised): the connection still
                # carries the watch, and given back to the pool the next request sent on it
                # would wait behind the stream until the server's timeoutSeconds
                resp.close()
            resp.release_conn()
        return rv

    def _handle(self, handler: Callable[..., None], *args: Any) -> None:
        """The owner's handler; whatever it raises (a KubeError too) means its state needs a listing."""
        try:
            handler(*args)
        except Exception as exc:
            raise _HandlerFailed(f"{self.name}: {getattr(handler, '__name__', 'handler')} raised {exc!r}") from exc

    def _cut(self) -> None:
        with self._resp_lock:
            resp = self._resp
        if resp is not None:
            try:
                resp.shutdown()
            except Exception:  # noqa: BLE001 -- best effort: the read ends with the stream anyway
                pass


class _HandlerFailed(Exception):
    """The owner's ``before_list``, ``on_list`` or ``on_event`` raised (the cause): never taken for a
    list/watch error."""
