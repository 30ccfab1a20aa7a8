"""Running the emulator: in a background thread (tests, sandbox) or inside a running loop.

:class:`KubeEmulator` owns a :class:`~gpucaas.devtools.kube_emulator.store.Store`, serves it
with aiohttp on ``host:port`` (port 0 = ephemeral), writes a kubeconfig the official
client and Kopf load unchanged, and optionally persists every object to a JSON file
(written atomically, shortly after each change, and on stop; loaded on start).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from gpucaas.devtools.kube_emulator.app import build_app
from gpucaas.devtools.kube_emulator.authn import Authenticator, User, parse_token_file
from gpucaas.devtools.kube_emulator.security import Security
from gpucaas.devtools.kube_emulator.store import Store

log = logging.getLogger(__name__)

CONTEXT_NAME = "gpucaas-kube-emulator"
PERSIST_DELAY_S = 0.2


def kubeconfig_dict(url: str, namespace: str = "default", *, token: str, ca_pem: str | None = None,
                    user: str = CONTEXT_NAME) -> dict[str, Any]:
    """A kubeconfig for an emulator at ``url`` that authenticates with ``token`` (HTTPS: trusts ``ca_pem``)."""
    import base64

    cluster: dict[str, Any] = {"server": url}
    if ca_pem:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem.encode()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT_NAME, "cluster": cluster}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": CONTEXT_NAME, "context": {"cluster": CONTEXT_NAME, "user": user,
                                                         "namespace": namespace}}],
        "current-context": CONTEXT_NAME,
        "preferences": {},
    }


class KubeEmulator:
    """A Kubernetes API emulator served over HTTP (for development and tests only).

    ``start()``/``stop()`` run it in a thread with its own event loop; inside a running
    loop use ``async with KubeEmulator(...) as emu`` (or ``await emu.astart()``/``astop()``).
    ``emu.store`` belongs to the emulator's loop: from other threads go through HTTP, the
    helpers here (``set_pod_log``, ``compact``) or ``emu.call(fn, ...)``.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, persist_path: str | os.PathLike[str] | None = None,
                 install_project_crds: bool = False, *, event_history: int = 10000,
                 bookmark_interval: float = 5.0, pod_graceful_deletion: bool = False,
                 admin_token: str | None = None, token_auth_file: str | os.PathLike[str] | None = None,
                 static_tokens: dict[str, User] | None = None, anonymous_auth: bool = False,
                 audit_log: str | os.PathLike[str] | None = None, tls_port: int | None = None) -> None:
        self.host = host
        self.port = port
        self.tls_port = tls_port  # None: no HTTPS listener; 0: an ephemeral one
        self.tls_material: dict[str, str] | None = None
        self.persist_path = Path(persist_path) if persist_path else None
        self.install_project_crds = install_project_crds
        self.bookmark_interval = bookmark_interval
        self.store = Store(event_history=event_history, pod_graceful_deletion=pod_graceful_deletion)
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._persist_handle: asyncio.TimerHandle | None = None
        tokens = dict(parse_token_file(token_auth_file)) if token_auth_file else {}
        tokens.update(static_tokens or {})
        self._fixed_admin_token = admin_token is not None
        self.security = Security(Authenticator(admin_token=admin_token, static_tokens=tokens,
                                               anonymous=anonymous_auth), audit_path=audit_log)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def https_url(self) -> str:
        if self.tls_port is None:
            raise RuntimeError("this emulator serves no HTTPS (start it with tls_port=0 or a port)")
        return f"https://{self.host}:{self.tls_port}"

    @property
    def admin_token(self) -> str:
        """The bearer token of the emulator's cluster-admin (group ``system:masters``)."""
        return self.security.authn.admin_token

    def add_token(self, token: str, user: User) -> None:
        """Accept ``token`` as ``user`` (a static token, like ``--token-auth-file``)."""
        from gpucaas.devtools.kube_emulator.authn import with_authenticated

        self.security.authn.static[token] = with_authenticated(user)

    # ---- in-loop lifecycle ---------------------------------------------------------

    async def astart(self) -> KubeEmulator:
        self._loop = asyncio.get_running_loop()
        self.store.bind_loop(self._loop)
        if self.persist_path and self.persist_path.exists():
            state = json.loads(self.persist_path.read_text())
            self.store.restore(state)
            self.security.authn.restore(state.get("authentication"), keep_admin_token=self._fixed_admin_token)
            self.tls_material = state.get("tls")
            log.info("kube emulator: loaded %s (resourceVersion %s)", self.persist_path, self.store.rv)
        self._install_bootstrap_policy()
        if self.install_project_crds:
            self._install_project_crds()
        if self.persist_path:
            self.store.on_change = self._schedule_persist
        app = build_app(self.store, bookmark_interval=self.bookmark_interval, security=self.security)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = site._server  # the bound socket tells the ephemeral port
        if self.port == 0 and server is not None and server.sockets:  # type: ignore[union-attr]
            self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        if self.tls_port is not None:
            from gpucaas.devtools.kube_emulator import tls

            if self.tls_material is None:
                self.tls_material = tls.generate((self.host,))
            secure = web.TCPSite(self._runner, self.host, self.tls_port, ssl_context=tls.server_context(self.tls_material))
            await secure.start()
            if self.tls_port == 0 and secure._server is not None and secure._server.sockets:  # type: ignore[union-attr]
                self.tls_port = secure._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        log.info("kube emulator serving on %s", self.url)
        return self

    async def astop(self) -> None:
        for w in list(self.store.watchers):
            w.queue.put_nowait(None)
        for futs in self.store.log_waiters.values():
            for fut in futs:
                if not fut.done():
                    fut.set_result(None)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._persist_handle is not None:
            self._persist_handle.cancel()
            self._persist_handle = None
        if self.persist_path:
            self.persist()
        self.security.close()

    async def __aenter__(self) -> KubeEmulator:
        return await self.astart()

    async def __aexit__(self, *exc: object) -> None:
        await self.astop()

    # ---- threaded lifecycle --------------------------------------------------------

    def start(self, timeout: float = 30.0) -> KubeEmulator:
        """Serve in a background thread; returns once the port is listening."""
        started: concurrent.futures.Future[None] = concurrent.futures.Future()

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.astart())
            except BaseException as exc:  # report start failures to the caller
                started.set_exception(exc)
                loop.close()
                return
            started.set_result(None)
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self.astop())
                pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
                for t in pending:
                    t.cancel()
                if pending:
                    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._thread = threading.Thread(target=run, name="kube-emulator", daemon=True)
        self._thread.start()
        started.result(timeout)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        if self._thread is None or self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
        self._thread = None

    def __enter__(self) -> KubeEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args)`` on the emulator's loop (thread-safe) and return its result."""
        if self._thread is None or self._loop is None:
            return fn(*args, **kwargs)

        async def run() -> Any:
            return fn(*args, **kwargs)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(30)

    # ---- conveniences --------------------------------------------------------------

    def write_kubeconfig(self, path: str | os.PathLike[str], namespace: str = "default", *,
                         token: str | None = None, user: str = CONTEXT_NAME, tls: bool | None = None) -> Path:
        """Write a kubeconfig for this emulator to ``path`` and return it.

        It authenticates with ``token`` (default: the cluster-admin's) and points at the
        HTTPS address when there is one (``tls``; kubectl sends no token over HTTP).
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        secure = self.tls_port is not None if tls is None else tls
        url, ca = (self.https_url, (self.tls_material or {}).get("ca")) if secure else (self.url, None)
        doc = kubeconfig_dict(url, namespace, token=token or self.admin_token, ca_pem=ca, user=user)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        path.chmod(0o600)
        return path

    def set_pod_log(self, namespace: str, name: str, text: str, *, container: str | None = None,
                    append: bool = True) -> None:
        """Append to (or replace) a pod container's log, as a node agent would produce it."""
        self.call(self.store.write_log, namespace, name, text, container=container, append=append)

    def compact(self) -> None:
        """Forget the watch history: watches from older resourceVersions get 410 Gone."""
        self.call(self.store.compact)

    def _install_bootstrap_policy(self) -> None:
        """Create the default RBAC objects a real server creates at start (missing ones only)."""
        from gpucaas.devtools.kube_emulator import bootstrap_policy, errors

        for obj in bootstrap_policy.objects():
            rt = self.store.registry.by_kind(obj["apiVersion"], obj["kind"])
            assert rt is not None
            try:
                self.store.create(rt, obj["metadata"].get("namespace"), obj)
            except errors.AlreadyExists:
                pass

    def _install_project_crds(self) -> None:
        from gpucaas.core.crds import crd_manifests
        from gpucaas.devtools.kube_emulator import errors
        from gpucaas.devtools.kube_emulator.store import CRD_KEY

        rt = self.store.registry.get(*CRD_KEY)
        assert rt is not None
        for crd in crd_manifests():
            try:
                self.store.create(rt, None, crd)
            except errors.AlreadyExists:
                self.store.update(rt, None, crd["metadata"]["name"], crd)

    # ---- persistence ---------------------------------------------------------------

    def _schedule_persist(self) -> None:
        if self._loop is None or self._persist_handle is not None:
            return
        self._persist_handle = self._loop.call_later(PERSIST_DELAY_S, self._persist_now)

    def _persist_now(self) -> None:
        self._persist_handle = None
        self.persist()

    def persist(self) -> None:
        """Write every object to ``persist_path`` atomically (no-op without a path)."""
        if not self.persist_path:
            return
        data = json.dumps({**self.store.snapshot(), "authentication": self.security.authn.state(),
                           "tls": self.tls_material})
        tmp = self.persist_path.with_name(self.persist_path.name + ".tmp")
        self.persist_path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(data)
        os.replace(tmp, self.persist_path)
