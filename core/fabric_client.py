"""Client of the fabric service's node-local API (HTTP/1.1 + JSON over a unix socket).

The device plugin asks it to activate the NVLink partition of an allocation and
to release it; ``caasctl`` uses it for the admin operations. The server lives in
``services/fabric/server.py``; the bodies both sides exchange are the types of
:mod:`core.fabric_messages`, and every answer is validated with them here, so a
method returns the message it names (a ``dict`` typed field by field) or raises.

Errors from the server are JSON ``{"code": str, "detail": str}`` and become:

- :class:`FabricUnavailable` -- the socket is absent or refuses, the request
  timed out, or the service answered 503 (Fabric Manager or its VM is down);
  worth retrying later.
- :class:`FabricConflict` -- 409: a needed partition overlaps an active partition
  of another holder (``detail`` names that holder / pod).
- :class:`FabricRejected` -- any other 4xx/5xx: bad input, unsupported partition.
- :class:`FabricMalformed` -- the answer is not the message the route defines
  (``detail`` names each wrong field): a server of another version, or not the
  fabric service.
"""

from __future__ import annotations

import http.client
import json as _json
import os
import socket
import threading
from collections.abc import Iterable, Mapping
from time import monotonic, sleep
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

from core import fabric_messages as fm
from core.backoff import Backoff

DEFAULT_SOCKET = "/run/gpucaas/fabric.sock"
SOCKET_ENV = "GPUCAAS_FABRIC_SOCKET"


def holder_for_gpus(pci_addresses: Iterable[str]) -> str:
    """The device plugin's holder key of an allocation: ``gpus:`` + sorted PCI addresses."""
    return "gpus:" + "+".join(sorted(pci_addresses))


class FabricError(Exception):
    """An error answered by (or on the way to) the fabric service."""

    def __init__(self, detail: str, *, code: str = "error", status: int | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.code = code
        self.status = status

    def __str__(self) -> str:
        prefix = f"{self.status} " if self.status is not None else ""
        return f"{prefix}{self.code}: {self.detail}"


class FabricUnavailable(FabricError):
    """The fabric service, its Fabric Manager or its service VM cannot be reached now."""


class FabricConflict(FabricError):
    """A needed partition is held (active) by another holder."""


class FabricRejected(FabricError):
    """The request was refused (bad input, unknown or unsupported partition, ...)."""


class FabricMalformed(FabricError):
    """The answer is not the route's message (:mod:`core.fabric_messages`); ``detail`` names the fields."""


M = TypeVar("M")


def _error_for(status: int, reason: str, raw: bytes) -> FabricError:
    text = raw.decode("utf-8", "replace")
    try:
        body = fm.parse(fm.ErrorBody, _json.loads(raw))
        code, detail = body["code"], body["detail"]
    except ValueError:  # not JSON, or not an error body (a proxy's page, ...): its text
        code, detail = "error", text or reason
    if status == 409:
        return FabricConflict(detail, code=code, status=status)
    if status in (502, 503, 504):
        return FabricUnavailable(detail, code=code, status=status)
    return FabricRejected(detail, code=code, status=status)


class _UnixConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a unix socket; persistent (keep-alive) like any HTTPConnection."""

    def __init__(self, socket_path: str, timeout: float) -> None:
        super().__init__("fabric", timeout=timeout)
        self.socket_path = socket_path
        self.connect_timeout = timeout  # HTTPConnection's own may be None; this one never is

    def connect(self) -> None:
        # A unix-socket connect() with a timeout does not queue when the server's listen
        # backlog is full: it fails at once with EAGAIN (unix(7)). A busy server is not an
        # absent one, so such a connect is tried again, backing off, until the timeout.
        deadline = monotonic() + self.connect_timeout
        backoff = Backoff(initial_s=0.001, max_s=0.1)
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(self.timeout)
                sock.connect(self.socket_path)
            except BlockingIOError:
                sock.close()
                pause = backoff.next()
                if monotonic() + pause > deadline:
                    raise
                sleep(pause)
                continue
            except BaseException:
                sock.close()
                raise
            self.sock = sock
            return


#: A reused keep-alive connection the server has closed meanwhile fails with one of these
#: before any answer; such a request is sent once more on a fresh connection.
_STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)


class FabricClient:
    """Synchronous client of the fabric service's unix-socket API.

    ``socket_path`` defaults to ``$GPUCAAS_FABRIC_SOCKET`` or ``/run/gpucaas/fabric.sock``.
    Connections are kept alive and reused (a small pool, one connection per concurrent
    caller), so a call costs one request/response on an open socket, not a connect; one
    instance may be shared between threads. Built on the standard library's
    ``http.client`` so that node daemons do not import an HTTP client package.
    """

    def __init__(self, socket_path: str | os.PathLike[str] | None = None, timeout: float = 10.0) -> None:
        self.socket_path = str(socket_path or os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET)
        self.timeout = timeout
        self._idle: list[_UnixConnection] = []
        self._lock = threading.Lock()
        self._closed = False

    # --- plumbing ---------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def __enter__(self) -> FabricClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _take(self) -> tuple[_UnixConnection, bool]:
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        return _UnixConnection(self.socket_path, self.timeout), False

    def _give_back(self, conn: _UnixConnection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < 8:
                self._idle.append(conn)
                return
        conn.close()

    def _exchange(self, method: str, target: str, body: bytes | None) -> tuple[int, str, bytes]:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        while True:
            conn, reused = self._take()
            try:
                conn.request(method, target, body=body, headers=headers)
                response = conn.getresponse()
                raw = response.read()
            except _STALE:
                conn.close()
                if reused:
                    continue  # the server closed an idle keep-alive connection: once more, fresh
                raise
            except BaseException:
                conn.close()
                raise
            if response.will_close:
                conn.close()
            else:
                self._give_back(conn)
            return response.status, response.reason, raw

    def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
    ) -> Any:
        """The decoded JSON answer of a 2xx (None for an empty one), else the error it stands for."""
        target = path + ("?" + urlencode(params) if params else "")
        body = None if json is None else _json.dumps(json).encode()
        try:
            status, reason, raw = self._exchange(method, target, body)
        except (OSError, http.client.HTTPException) as exc:  # absent socket, refused, timed out, cut
            raise FabricUnavailable(
                f"fabric service at {self.socket_path} unreachable: {exc!r}", code="unreachable"
            ) from exc
        if status >= 400:
            raise _error_for(status, reason, raw)
        try:
            return _json.loads(raw) if raw else None
        except ValueError as exc:
            raise FabricMalformed(
                f"{method} {path}: the answer is not JSON ({exc})", code="malformed", status=status
            ) from None

    def _call(self, message: type[M], method: str, path: str, **kwargs: Any) -> M:
        """``_request``, its answer validated as ``message`` (else :class:`FabricMalformed` naming the fields)."""
        answer = self._request(method, path, **kwargs)
        try:
            return fm.parse(message, answer)
        except fm.MessageError as exc:
            raise FabricMalformed(
                f"{method} {path}: the answer is not a {getattr(message, '__name__', message)}: {exc}",
                code="malformed",
            ) from None

    # --- read -------------------------------------------------------------------------
    def topology(self) -> fm.Topology:
        """GPUs by physical id with their PCI address and health, and the host's layout."""
        return self._call(fm.Topology, "GET", "/v1/topology")

    def partitions(self) -> list[fm.Partition]:
        """Every partition: id, gpus, nvlinks, active, supported, holder."""
        return self._call(fm.Partitions, "GET", "/v1/partitions")["partitions"]

    def activations(self) -> list[fm.ActivationRecord]:
        """The service's records: holder, gpus, partition_ids, pod, since, ..."""
        return self._call(fm.Activations, "GET", "/v1/activations")["activations"]

    def health(self) -> fm.Health:
        return self._call(fm.Health, "GET", "/v1/health")

    # --- allocations ------------------------------------------------------------------
    def activate(self, holder: str, gpus: Iterable[str]) -> fm.ActivationResult:
        """Activate the partition(s) for these GPUs (PCI addresses) on behalf of ``holder``.

        Idempotent for the same holder and GPU set. Raises FabricConflict when a needed
        partition overlaps an active partition of another holder.
        """
        request = fm.ActivationRequest(holder=holder, gpus=list(gpus))
        return self._call(fm.ActivationResult, "POST", "/v1/activations", json=request)

    def release(self, holder: str) -> fm.ReleaseResult:
        """Deactivate what ``holder`` holds (idempotent: an unknown holder is fine)."""
        return self._call(fm.ReleaseResult, "DELETE", f"/v1/activations/{quote(holder, safe='')}")

    def sync(
        self, live: Iterable[fm.LiveHolder | Mapping[str, Any] | str], grace_seconds: float | None = 30.0
    ) -> fm.SyncResult:
        """Tell the service which holders are alive; it releases the others older than grace.

        ``live`` items are ``{"holder": str, "pod": "ns/name" | None}`` or plain holder strings.
        ``grace_seconds=None`` leaves the grace to the service (GPUCAAS_FABRIC_RELEASE_GRACE_S).
        Returns ``{"released": [...], "pending": [...], "kept": [...]}``.
        """
        items = [
            fm.LiveHolder(holder=x, pod=None)
            if isinstance(x, str)
            else fm.LiveHolder(holder=x["holder"], pod=x.get("pod"))
            for x in live
        ]
        body = fm.SyncRequest(live=items)
        if grace_seconds is not None:
            body["grace_seconds"] = grace_seconds
        return self._call(fm.SyncResult, "POST", "/v1/activations/sync", json=body)

    # --- admin (caasctl) --------------------------------------------------------------
    def activate_partition(self, partition_id: int, force: bool = False) -> fm.AdminActivation:
        return self._admin(fm.AdminActivation, partition_id, "activate", force)

    def deactivate_partition(self, partition_id: int, force: bool = False) -> fm.AdminDeactivation:
        return self._admin(fm.AdminDeactivation, partition_id, "deactivate", force)

    def _admin(self, message: type[M], partition_id: int, verb: str, force: bool) -> M:
        """``POST /v1/partitions/{id}/{verb}?force=...``, its answer validated as ``message``."""
        params = {"force": str(bool(force)).lower()}
        return self._call(message, "POST", f"/v1/partitions/{int(partition_id)}/{verb}", params=params)
