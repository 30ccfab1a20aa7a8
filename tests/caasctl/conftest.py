"""Fixtures of the caasctl tests: the session's Kubernetes cluster, one HTTPS API and one fabric
service (Fabric Manager simulator on a unix socket) per module, and a runner for the CLI.

The API server is the API tests' harness (``tests.api.harness.ApiServer``); the fabric
service is started the way the fabric tests start it (``PartitionService`` over the
simulator, served by ``UnixServer``). Module scope keeps the suite lean: each test uses
its own tenancy / node / partition names so tests do not see each other's objects.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpucaas.caasctl.main import app
from services.api.settings import Settings
from tests.api.harness import ADMIN_TOKEN, ApiServer


@pytest.fixture(scope="module")
def kcfg(kube_cluster: Any) -> Iterator[Path]:
    """The session cluster's admin kubeconfig; what the module made is removed after it."""
    cluster, snapshot = kube_cluster
    try:
        yield cluster.admin_kubeconfig
    finally:
        snapshot.reset()


@pytest.fixture(scope="module")
def kube(kcfg: Path) -> Iterator[Any]:
    """The official kubernetes client, configured for the cluster."""
    from core.kube import new_api_client

    client = new_api_client(kcfg)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="module")
def logs(kube: Any, kube_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The kubelet's log endpoint for the module's pods (``logs.write(ns, pod, text)``)."""
    from tests.fixtures.kube import node_logs_for

    with node_logs_for(kube, kube_cluster[0], tmp_path_factory.mktemp("kubelet")) as node_logs:
        yield node_logs


@pytest.fixture(scope="module")
def ca() -> Any:
    import trustme

    return trustme.CA()


@pytest.fixture(scope="module")
def ca_file(ca: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test CA's certificate: what an admin passes as --ca-cert / GPUCAAS_CA_CERT."""
    path = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(path)
    return path


def start_api(ca: Any, kcfg: Path, tmp_path_factory: pytest.TempPathFactory, **overrides: Any) -> ApiServer:
    """An API over HTTPS (SQLite) against the module's Kubernetes cluster; ``overrides``:
    more settings."""
    folder = tmp_path_factory.mktemp("api")
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert.cert_chain_pems[0].write_to_path(cert_file)
    for pem in cert.cert_chain_pems[1:]:
        pem.write_to_path(cert_file, append=True)
    cert.private_key_pem.write_to_path(key_file)
    settings = Settings(
        host="127.0.0.1",
        port=0,
        tls_cert=cert_file,
        tls_key=key_file,
        database_url=f"sqlite:///{folder / 'api.db'}",
        kubeconfig=kcfg,
        admin_token=ADMIN_TOKEN,
        worker_poll_seconds=0.2,
        retry_max_seconds=1.0,
        kube_timeout_seconds=5.0,
        **overrides,
    )
    return ApiServer(settings, ca=ca).start()


@pytest.fixture(scope="module")
def api(ca: Any, kcfg: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """The API over HTTPS (SQLite) against the module's Kubernetes cluster."""
    server = start_api(ca, kcfg, tmp_path_factory)
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Fabric:
    """A running fabric service: its socket, the simulated fabric and the partition service."""

    socket: Path
    fabric: Any  # SimulatedFabric
    service: Any  # PartitionService


@pytest.fixture(scope="module")
def fabric_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    """The fabric service's local API on a unix socket, over the Fabric Manager simulator."""
    from services.fabric.bookkeeping import ActivationStore
    from services.fabric.fabric_manager.simulator import SimulatedFabric, SimulatedFabricManager
    from services.fabric.partitions import PartitionService
    from services.fabric.server import UnixServer, create_app

    fabric = SimulatedFabric()
    store = ActivationStore(tmp_path_factory.mktemp("fabric-state") / "state").open()
    service = PartitionService(SimulatedFabricManager(fabric), store)
    # unix socket paths are limited to 107 bytes: a short pytest temp dir
    socket = tmp_path_factory.mktemp("sock") / "fabric.sock"
    server = UnixServer(create_app(service), socket)
    server.start()
    try:
        yield Fabric(socket=socket, fabric=fabric, service=service)
    finally:
        server.stop()
        store.close()


@dataclass
class Run:
    """One caasctl invocation's outcome."""

    exit_code: int
    stdout: str
    stderr: str
    exception: BaseException | None = None

    def json(self) -> Any:
        return json.loads(self.stdout)

    def yaml(self) -> Any:
        return yaml.safe_load(self.stdout)


Caasctl = Callable[..., Run]


def invoke(args: list[str], env: dict[str, str], input: str | None = None) -> Run:  # noqa: A002 - CliRunner's keyword
    """Run ``caasctl args`` in-process (typer's CliRunner) with exactly ``env`` for its settings."""
    base = {
        "GPUCAAS_URL": None,
        "GPUCAAS_TOKEN": None,
        "GPUCAAS_CA_CERT": None,
        "GPUCAAS_CONFIG": None,
        "GPUCAAS_FABRIC_SOCKET": None,
        "GPUCAAS_FABRIC_SOCKET_PATH": None,
        "COLUMNS": "250",
    }
    result = CliRunner().invoke(app, [str(a) for a in args], env={**base, **env}, input=input)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a crash, not an exit code: show the traceback
    return Run(result.exit_code, result.stdout, result.stderr, result.exception)


@pytest.fixture
def no_config(tmp_path: Path) -> dict[str, str]:
    """Settings from nowhere: no env, a config path that does not exist (not ~/.config of this machine)."""
    return {"GPUCAAS_CONFIG": str(tmp_path / "absent.yaml")}


@pytest.fixture
def caasctl(api: ApiServer, ca_file: Path, no_config: dict[str, str]) -> Caasctl:
    """``caasctl(*args, env=..., input=...)`` against the module's API, as an admin (env settings)."""

    def run(*args: Any, env: dict[str, str] | None = None, input: str | None = None) -> Run:  # noqa: A002 - as invoke
        settings = {
            **no_config,
            "GPUCAAS_URL": api.base_url,
            "GPUCAAS_TOKEN": ADMIN_TOKEN,
            "GPUCAAS_CA_CERT": str(ca_file),
        }
        return invoke(list(args), {**settings, **(env or {})}, input=input)

    return run


@pytest.fixture(scope="module")
def caasctl_bin() -> Path:
    """The installed console script (pyproject's ``caasctl = gpucaas.caasctl.main:run``)."""
    import sys

    path = Path(sys.executable).parent / "caasctl"
    if not path.exists():
        pytest.fail(f"{path} is missing: install the project (pip install -e .) to get the caasctl entry point")
    return path


def clean_env(**extra: str) -> dict[str, str]:
    """The process environment without any GPUCAAS_* setting, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUCAAS_")}
    env.update(extra)
    return env
