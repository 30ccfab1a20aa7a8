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
from gpucaas.devtools.kube_emulator.store import Store

log = logging.getLogger(__name__)

CONTEXT_NAME = "gpucaas-kube-emulator"
PERSIST_DELAY_S = 0.2


def kubeconfig_dict(url: str, namespace: str = "default") -> dict[str, Any]:
    """A kubeconfig for an emulator at ``url`` (plain HTTP; the token is not checked)."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT_NAME, "cluster": {"server": url}}],
        "users": [{"name": CONTEXT_NAME, "user": {"token": "gpucaas-kube-emulator"}}],
        "contexts": [{"name": CONTEXT_NAME, "context": {"cluster": CONTEXT_NAME, "user": CONTEXT_NAME,
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
                 bookmark_interval: float = 5.0, pod_graceful_deletion: bool = False) -> None:
        self.host = host
        self.port = port
        self.persist_path = Path(persist_path) if persist_path else None
        self.install_project_crds = install_project_crds
        self.bookmark_interval = bookmark_interval
        self.store = Store(event_history=event_history, pod_graceful_deletion=pod_graceful_deletion)
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._persist_handle: asyncio.TimerHandle | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # ---- in-loop lifecycle ---------------------------------------------------------

    async def astart(self) -> KubeEmulator:
        self._loop = asyncio.get_running_loop()
        self.store.bind_loop(self._loop)
        if self.persist_path and self.persist_path.exists():
            self.store.restore(json.loads(self.persist_path.read_text()))
            log.info("kube emulator: loaded %s (resourceVersion %s)", self.persist_path, self.store.rv)
        if self.install_project_crds:
            self._install_project_crds()
        if self.persist_path:
            self.store.on_change = self._schedule_persist
        app = build_app(self.store, bookmark_interval=self.bookmark_interval)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = site._server  # the bound socket tells the ephemeral port
        if self.port == 0 and server is not None and server.sockets:  # type: ignore[union-attr]
            self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
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

    def write_kubeconfig(self, path: str | os.PathLike[str], namespace: str = "default") -> Path:
        """Write a kubeconfig for this emulator to ``path`` and return it."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(kubeconfig_dict(self.url, namespace), sort_keys=False))
        return path

    def set_pod_log(self, namespace: str, name: str, text: str, *, container: str | None = None,
                    append: bool = True) -> None:
        """Append to (or replace) a pod container's log, as a node agent would produce it."""
        self.call(self.store.write_log, namespace, name, text, container=container, append=append)

    def compact(self) -> None:
        """Forget the watch history: watches from older resourceVersions get 410 Gone."""
        self.call(self.store.compact)

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
        data = json.dumps(self.store.snapshot())
        tmp = self.persist_path.with_name(self.persist_path.name + ".tmp")
        self.persist_path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(data)
        os.replace(tmp, self.persist_path)
