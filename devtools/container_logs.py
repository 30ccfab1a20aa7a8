"""The kubelet's container-log endpoint, for nodes that have no real kubelet.

kube-apiserver answers ``GET /api/v1/namespaces/{ns}/pods/{pod}/log`` by asking the pod's
node: it connects to ``https://<node InternalIP>:<status.daemonEndpoints.kubeletEndpoint.Port>
/containerLogs/{ns}/{pod}/{container}`` with its kubelet client certificate and relays the
answer (``follow``, ``tailLines``, ``limitBytes`` passed on). A node played by the sandbox's
node agent, or a test's node, serves that path from this server: text is appended to a
container's log as the stand-in produces it, and a followed log ends when the container
is marked finished — as a real container's log stream ends when the process exits.

Only kube-apiserver's connections are served: the client certificate must be signed by the
cluster's CA (``client_ca``).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
import threading
import urllib.parse
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

Key = tuple[str, str, str]  # namespace, pod, container


class LogBook:
    """Containers' output, appended as it is made; readers wait for more until the container ends.

    With a ``folder`` each container's log is also a file there (``<ns>_<pod>_<container>.log``,
    as the kubelet keeps them under /var/log/pods), read back when the book is made again:
    a restarted node keeps serving the logs of the pods it still holds.
    """

    def __init__(self, folder: Path | None = None) -> None:
        self._text: dict[Key, bytearray] = defaultdict(bytearray)
        self._ended: set[Key] = set()
        self._cond = threading.Condition()
        self.folder = folder
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            for path in folder.glob("*.log"):
                parts = path.stem.split("_")
                if len(parts) == 3:
                    self._text[(parts[0], parts[1], parts[2])] += path.read_bytes()

    def _file(self, key: Key) -> Path | None:
        return self.folder / f"{key[0]}_{key[1]}_{key[2]}.log" if self.folder is not None else None

    def append(self, namespace: str, pod: str, container: str, text: str) -> None:
        key = (namespace, pod, container)
        with self._cond:
            self._text[key] += text.encode()
            path = self._file(key)
            if path is not None:
                with path.open("ab") as f:
                    f.write(text.encode())
            self._cond.notify_all()

    def end_pod(self, namespace: str, pod: str) -> None:
        """Every container of the pod exited."""
        with self._cond:
            for key in [k for k in self._text if k[:2] == (namespace, pod)]:
                self._ended.add(key)
            self._cond.notify_all()

    def end(self, namespace: str, pod: str, container: str) -> None:
        """The container exited: followers get the rest and their stream ends."""
        with self._cond:
            self._ended.add((namespace, pod, container))
            self._text[(namespace, pod, container)]  # a container that printed nothing still exists
            self._cond.notify_all()

    def forget(self, namespace: str, pod: str) -> None:
        with self._cond:
            for key in [k for k in self._text if k[:2] == (namespace, pod)]:
                self._text.pop(key, None)
                self._ended.add(key)  # a follower still attached ends
                path = self._file(key)
                if path is not None:
                    path.unlink(missing_ok=True)
            self._cond.notify_all()

    def known(self, key: Key) -> bool:
        with self._cond:
            return key in self._text

    def read(self, key: Key, offset: int, wait: float | None) -> tuple[bytes, bool]:
        """Bytes after ``offset`` and whether the container has ended; with ``wait``, blocks
        up to that long for more."""
        with self._cond:
            if wait and len(self._text.get(key, b"")) <= offset and key not in self._ended:
                self._cond.wait(wait)
            data = bytes(self._text.get(key, b"")[offset:])
            return data, key in self._ended


def _tail(data: bytes, lines: int) -> bytes:
    if lines <= 0:
        return b""
    parts = data.splitlines(keepends=True)
    return b"".join(parts[-lines:])


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the stdlib's name)
        return

    def do_GET(self) -> None:  # the stdlib's name
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/") if p]
        if len(parts) != 4 or parts[0] != "containerLogs":
            self.send_error(404, "only /containerLogs/{namespace}/{pod}/{container} is served here")
            return
        key: Key = (parts[1], parts[2], parts[3])
        book = self.server.book
        if not book.known(key):
            self.send_error(404, f"container {key[2]!r} of pod {key[0]}/{key[1]} has no log on this node")
            return
        query = urllib.parse.parse_qs(url.query)
        follow = query.get("follow", ["false"])[0] == "true"
        tail = int(query["tailLines"][0]) if "tailLines" in query else None
        limit = int(query["limitBytes"][0]) if "limitBytes" in query else None
        data, ended = book.read(key, 0, None)
        offset = len(data)
        if tail is not None:
            data = _tail(data, tail)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = 0
        try:
            while True:
                if limit is not None:
                    data = data[: max(0, limit - sent)]
                if data:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                    sent += len(data)
                if not follow or ended or (limit is not None and sent >= limit) or self.server.closing:
                    break
                data, ended = book.read(key, offset, 1.0)
                offset += len(data)
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass
        self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    book: LogBook
    closing = False


def _serving_pair(folder: Path, host: str) -> tuple[Path, Path]:
    """A self-signed serving certificate (kube-apiserver verifies none without --kubelet-certificate-authority)."""
    cert, key_path = folder / "kubelet-serving.pem", folder / "kubelet-serving-key.pem"
    if cert.exists() and key_path.exists():
        return cert, key_path
    folder.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = dt.datetime.now(dt.UTC)
    built = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    key_path.chmod(0o600)
    cert.write_bytes(built.public_bytes(serialization.Encoding.PEM))
    return cert, key_path


class ContainerLogServer:
    """Serves :class:`LogBook` on ``https://<host>:<port>/containerLogs/...`` for kube-apiserver."""

    def __init__(
        self, folder: Path, client_ca: Path, *, host: str = "127.0.0.1", port: int = 0, book: LogBook | None = None
    ) -> None:
        self.book = book or LogBook()
        cert, key = _serving_pair(folder, host)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(cert), str(key))
        ctx.load_verify_locations(str(client_ca))
        ctx.verify_mode = ssl.CERT_REQUIRED
        self._server = _Server((host, port), _Handler)
        self._server.book = self.book
        self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True)
        self.host = host
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="container-logs", daemon=True)

    def start(self) -> ContainerLogServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.closing = True
        self._server.shutdown()
        self._server.server_close()
