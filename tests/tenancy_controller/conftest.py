"""Fixtures: the local cluster with Cilium's and Kopf's CRDs, and the controller running against it."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools import waiting
from services.tenancy_controller import kube, main
from services.tenancy_controller.settings import ControllerSettings

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
MANIFESTS = HERE / "manifests"
EXTRA_CRDS = ("ciliumnetworkpolicies.cilium.io.yaml", "clusterkopfpeerings.kopf.dev.yaml")
TIMEOUT = 60.0
#: ``gpucaas controller`` without the GPU-lease timers: only this service's handlers (the timers have their own tests).
ONLY_TENANCY_HANDLERS = {"GPUCAAS_CONTROLLER_GPU_LEASES": "false"}


def wait_for(predicate: Callable[[], Any], *, timeout: float = TIMEOUT, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy (bounded, generous)."""
    return waiting.wait_for(predicate, timeout, interval=0.05, what=what)


def install_crds(client: kube.KubeClient) -> None:
    for name in EXTRA_CRDS:
        crd = yaml.safe_load((MANIFESTS / name).read_text())
        try:
            client.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body=crd)
        except kube.errors.Conflict:
            pass


@pytest.fixture
def api(kubeconfig: Path) -> Iterator[kube.KubeClient]:
    """A JSON client on the local cluster, with the Cilium and Kopf peering CRDs installed."""
    client = kube.KubeClient(kube.connection(kubeconfig))
    install_crds(client)
    try:
        yield client
    finally:
        client.close()


def controller_settings(kubeconfig: Path, **overrides: Any) -> ControllerSettings:
    values: dict[str, Any] = dict(
        kubeconfig=kubeconfig,
        standalone=True,
        resync_interval_s=30.0,
        retry_delay_s=0.5,
        workers=4,
        post_events=False,
    )
    values.update(overrides)
    return ControllerSettings(**values)


class ControllerThread:
    """The operator in a thread of this process (its own event loop), stopped by a flag."""

    def __init__(
        self,
        settings: ControllerSettings,
        registrars: tuple[main.Registrar, ...] = main.DEFAULT_REGISTRARS,
    ) -> None:
        self.settings = settings
        self.registrars = registrars
        self.stop_flag = threading.Event()
        self.ready_flag = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="tenancy-controller", daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(
                main.serve(
                    self.settings,
                    self.registrars,
                    stop_flag=self.stop_flag,
                    ready_flag=self.ready_flag,
                    identity="test-controller",
                )
            )
        except BaseException as exc:  # noqa: BLE001 - surfaced by stop()
            self.error = exc

    def start(self) -> ControllerThread:
        self.thread.start()
        wait_for(lambda: self.ready_flag.is_set() or self.error, what="controller ready")
        if self.error:
            raise self.error
        return self

    def stop(self) -> None:
        self.stop_flag.set()
        self.thread.join(TIMEOUT)
        assert not self.thread.is_alive(), "controller did not stop"
        if self.error:
            raise self.error


@pytest.fixture
def controller(api: kube.KubeClient, kubeconfig: Path) -> Iterator[ControllerThread]:
    ctl = ControllerThread(controller_settings(kubeconfig)).start()
    try:
        yield ctl
    finally:
        ctl.stop()


class ControllerProcess:
    """``gpucaas controller`` as a real process (for restarts and peering)."""

    def __init__(self, kubeconfig: Path, log_path: Path, *args: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), **ONLY_TENANCY_HANDLERS}
        env.pop("KUBECONFIG", None)
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from gpucaas.cli import app; app()",
                "controller",
                "--kubeconfig",
                str(kubeconfig),
                "--retry-delay-s",
                "0.5",
                "--workers",
                "4",
                *args,
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(TIMEOUT)
        self._log.close()

    def terminate(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(TIMEOUT)
        finally:
            self.kill()


@pytest.fixture
def spawn(kubeconfig: Path, tmp_path: Path) -> Iterator[Callable[..., ControllerProcess]]:
    procs: list[ControllerProcess] = []

    def start(*args: str) -> ControllerProcess:
        p = ControllerProcess(kubeconfig, tmp_path / f"controller-{len(procs)}.log", *args)
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.kill()
