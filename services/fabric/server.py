"""The node-local API: HTTP/1.1 + JSON over a unix socket, served by the standard library.

Used by the device plugin (activate on Allocate, release, sync from the kubelet's
PodResources) and by ``caasctl`` (list, health, forced admin operations). Every
request and answer body is a type of :mod:`core.fabric_messages`, the definition
``core.fabric_client`` parses with too: a request body is validated with it here
(400 naming the field), an answer is built as it. Errors are
``{"code", "detail"}`` with 400 (bad input, naming the field), 404, 405, 409
(conflict, naming the holder), 422 (unsupported partition), 503 (Fabric Manager
or VM unavailable).

Why no web framework: this is a node daemon with eight routes and one client on
the same host. ``http.server`` with HTTP/1.1 persistent connections answers an
activation in a fraction of a millisecond and keeps the process small (FastAPI and
uvicorn, with what they import beyond pydantic, cost about 30 MB resident here, of a
node daemon's 60 MB). Each connection
gets a thread (``socketserver.ThreadingMixIn``); the :class:`PartitionService`
lock orders racing requests, so they are decided one at a time.
"""

from __future__ import annotations

import json
import logging
import os
import re
import selectors
import socket
import socketserver
import stat
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

from core import fabric_messages as fm
from services.fabric.errors import FabricServiceError, InvalidRequest, NotFound
from services.fabric.partitions import PartitionService

log = logging.getLogger(__name__)

MAX_BODY = 1 << 20
M = TypeVar("M")


class MethodNotAllowed(FabricServiceError):
    code = "method_not_allowed"
    status = 405


# --- request bodies: validated by the shared message types, every error names the field ---------
def _body(message: type[M], body: Any) -> M:
    try:
        return fm.parse(message, body)
    except fm.MessageError as exc:
        raise InvalidRequest(str(exc)) from None


def _flag(query: dict[str, list[str]], name: str) -> bool:
    raw = (query.get(name) or ["false"])[-1].lower()
    if raw in ("true", "1", "yes", "on"):
        return True
    if raw in ("false", "0", "no", "off"):
        return False
    raise InvalidRequest(f"{name}: must be true or false")


def _partition_id(raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise InvalidRequest(f"partition_id: {raw!r} is not an integer") from None


# --- routing ---------------------------------------------------------------------------
Handler = Callable[[re.Match[str], dict[str, list[str]], Any], Any]


class FabricAPI:
    """The routes over ``service``; ``vm_state`` reports the service VM (None: no VM managed).

    ``dispatch(method, path, query, body)`` returns ``(status, json-able)``; the HTTP
    framing lives in :class:`UnixServer`.
    """

    def __init__(
        self,
        service: PartitionService,
        vm_state: Callable[[], fm.ServiceVMState] | None = None,
        default_grace_s: float = 30.0,
    ) -> None:
        self.service = service
        self.vm_state = vm_state
        self.default_grace_s = default_grace_s
        s = service
        self.routes: list[tuple[re.Pattern[str], dict[str, Handler]]] = [
            (re.compile(r"/v1/topology"), {"GET": lambda m, q, b: s.topology()}),
            (re.compile(r"/v1/partitions"), {"GET": lambda m, q, b: fm.Partitions(partitions=s.list_partitions())}),
            (
                re.compile(r"/v1/activations"),
                {"GET": lambda m, q, b: fm.Activations(activations=s.activations()), "POST": self._activate},
            ),
            (re.compile(r"/v1/activations/sync"), {"POST": self._sync}),
            (
                re.compile(r"/v1/activations/(?P<holder>.+)"),
                {"DELETE": lambda m, q, b: s.release(unquote(m["holder"]))},
            ),
            (re.compile(r"/v1/health"), {"GET": lambda m, q, b: self.health()}),
            (
                re.compile(r"/v1/partitions/(?P<pid>[^/]+)/activate"),
                {"POST": lambda m, q, b: s.admin_activate(_partition_id(m["pid"]), force=_flag(q, "force"))},
            ),
            (
                re.compile(r"/v1/partitions/(?P<pid>[^/]+)/deactivate"),
                {"POST": lambda m, q, b: s.admin_deactivate(_partition_id(m["pid"]), force=_flag(q, "force"))},
            ),
        ]

    def _activate(self, _m: re.Match[str], _q: dict[str, list[str]], body: Any) -> fm.ActivationResult:
        request = _body(fm.ActivationRequest, body)
        return self.service.activate(request["holder"], request["gpus"], pod=request.get("pod"))

    def _sync(self, _m: re.Match[str], _q: dict[str, list[str]], body: Any) -> fm.SyncResult:
        request = _body(fm.SyncRequest, body)
        grace = request.get("grace_seconds")
        return self.service.sync(request["live"], self.default_grace_s if grace is None else grace)

    def health(self) -> fm.Health:
        """Fabric Manager reachability, the service VM and GPUs with failed NVLinks."""
        service = self.service
        reachable = service.probe()
        failed: list[str] = []
        if reachable:
            try:
                failed = service.failed_gpus()
            except FabricServiceError:
                reachable = False
        return fm.Health(
            fabric_manager={
                "reachable": reachable,
                "backend": service.backend,
                "message": service.status.message,
                "replays": service.status.replays,
            },
            service_vm=self.vm_state() if self.vm_state else {"state": "unmanaged", "restarts": 0},
            failed_gpus=failed,
        )

    def dispatch(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        try:
            for pattern, methods in self.routes:
                m = pattern.fullmatch(path)
                if m is None:
                    continue
                handler = methods.get(method)
                if handler is None:
                    raise MethodNotAllowed(f"{method} is not allowed on {path}; allowed: {', '.join(methods)}")
                return 200, handler(m, query, body)
            raise NotFound(f"no route {path}")
        except FabricServiceError as exc:
            return exc.status, fm.ErrorBody(code=exc.code, detail=str(exc))
        except Exception as exc:  # the edge: log it, answer 500, keep serving
            log.exception("%s %s failed", method, path)
            return 500, fm.ErrorBody(code="error", detail=f"internal error: {type(exc).__name__}")


def create_app(
    service: PartitionService, vm_state: Callable[[], fm.ServiceVMState] | None = None, *, default_grace_s: float = 30.0
) -> FabricAPI:
    """The API over ``service``; ``vm_state`` reports the service VM (None: no VM managed)."""
    return FabricAPI(service, vm_state, default_grace_s)


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # persistent connections: the client keeps one open
    #: A buffered writer: the status line, headers and body leave in one send when
    #: handle_one_request flushes, not two (each send wakes the client once).
    wbufsize = -1
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 -- no access log
        return None

    def _answer(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response_only(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self) -> None:
        url = urlsplit(self.path)
        body: Any = None
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            self.close_connection = True
            self._answer(400, {"code": "invalid", "detail": "Content-Length: must be a byte count"})
            return
        if length > MAX_BODY:
            self.close_connection = True
            self._answer(413, {"code": "invalid", "detail": f"body: larger than {MAX_BODY} bytes"})
            return
        if length:
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw)
            except ValueError as exc:
                self._answer(400, {"code": "invalid", "detail": f"body: not JSON ({exc})"})
                return
        status, payload = self.server.api.dispatch(self.command, url.path, parse_qs(url.query), body)
        self._answer(status, payload)

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _handle  # noqa: N815 - http.server's method names


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False
    #: listen(2) backlog. socketserver's default is 5: on a busy node a burst of concurrent
    #: callers (kubelet Allocate calls, lease agents, admin CLI) then finds the queue full, and a
    #: unix-socket connect with a timeout fails at once with EAGAIN instead of waiting.
    request_queue_size = 128

    def __init__(self, path: str, api: FabricAPI) -> None:
        self.api = api
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(path, _RequestHandler)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self.connections_lock:
                self.connections.discard(request)

    def close_connections(self) -> None:
        with self.connections_lock:
            open_now = list(self.connections)
        for conn in open_now:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class UnixServer:
    """The API on a unix socket, in a background thread: stale socket removed, mode set, removed on stop."""

    def __init__(self, app: FabricAPI, socket_path: Path, mode: int = 0o660) -> None:
        self.app = app
        self.socket_path = Path(socket_path)
        self.mode = mode
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def _remove_stale(self) -> None:
        try:
            st = self.socket_path.lstat()
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise FabricServiceError(f"{self.socket_path} exists and is not a socket; refusing to remove it")
        log.info("removing stale socket %s", self.socket_path)
        self.socket_path.unlink()

    def start(self) -> None:
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        self._remove_stale()
        try:
            self._server = _Server(str(self.socket_path), self.app)  # bound and listening on return
        except OSError as exc:
            raise FabricServiceError(f"local API did not start on {self.socket_path}: {exc}") from exc
        os.chmod(self.socket_path, self.mode)
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(
            target=self._serve, args=(self._server, self._wake_r), name="fabric-api", daemon=True
        )
        self._thread.start()
        log.info("local API listening on %s", self.socket_path)

    @staticmethod
    def _serve(server: _Server, wake: int) -> None:
        """Accept until woken: no timeout, so an idle daemon does not wake at all."""
        with selectors.DefaultSelector() as sel:
            sel.register(server.fileno(), selectors.EVENT_READ)
            sel.register(wake, selectors.EVENT_READ)
            while True:
                for key, _ in sel.select():
                    if key.fd == wake:
                        return
                    # accept, then a thread for the connection (socketserver's own step; not in typeshed)
                    server._handle_request_noblock()  # type: ignore[attr-defined]

    def stop(self) -> None:
        if self._thread is not None:
            os.write(self._wake_w, b"x")
            self._thread.join(timeout=15)
            self._thread = None
            os.close(self._wake_r)
            os.close(self._wake_w)
        if self._server is not None:
            self._server.server_close()
            self._server.close_connections()
            self._server = None
        try:
            self.socket_path.unlink()
        except FileNotFoundError:
            pass
        log.info("local API on %s stopped", self.socket_path)

    def __enter__(self) -> UnixServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
