"""Fixtures of the API tests: a TLS pair, API servers on either database, tokens."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.api.settings import Settings
from tests.api.harness import ADMIN_TOKEN, ApiServer, write_dead_kubeconfig

#: The longest files first: ``make test`` runs this package on two workers, a file at a time
#: (``-n 2 --dist loadfile``), and a long file handed out last would run alone at the end.
LONGEST_FIRST = ("test_schemathesis.py", "test_durability.py")
HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move LONGEST_FIRST's tests to the front (the sort is stable: the rest keep their order)."""

    def rank(item: pytest.Item) -> int:
        name = item.path.name
        return LONGEST_FIRST.index(name) if item.path.parent == HERE and name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)


@pytest.fixture(scope="session")
def tls_ca() -> Any:
    import trustme

    return trustme.CA()


@pytest.fixture(scope="session")
def tls_pair(tls_ca: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed (test CA) certificate for 127.0.0.1 and its key, as PEM files."""
    cert = tls_ca.issue_cert("127.0.0.1", "localhost")
    folder = tmp_path_factory.mktemp("tls")
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert.cert_chain_pems[0].write_to_path(cert_file)
    for pem in cert.cert_chain_pems[1:]:
        pem.write_to_path(cert_file, append=True)
    cert.private_key_pem.write_to_path(key_file)
    return cert_file, key_file


@pytest.fixture
def dead_kubeconfig(tmp_path: Path) -> Path:
    return write_dead_kubeconfig(tmp_path / "kubeconfig-down")


@pytest.fixture
def make_settings(tls_pair: tuple[Path, Path]) -> Callable[..., Settings]:
    def make(database_url: str, kubeconfig: Path, **overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "host": "127.0.0.1",
            "port": 0,
            "tls_cert": tls_pair[0],
            "tls_key": tls_pair[1],
            "database_url": database_url,
            "kubeconfig": kubeconfig,
            "admin_token": ADMIN_TOKEN,
            "worker_poll_seconds": 0.2,
            "retry_max_seconds": 1.0,
            "kube_timeout_seconds": 5.0,
            "admission_retry_seconds": 0.2,
        }
        values.update(overrides)
        return Settings(**values)

    return make


@pytest.fixture
def serve(make_settings: Callable[..., Settings], tls_ca: Any) -> Iterator[Callable[..., ApiServer]]:
    """Start API servers (stopped at teardown): ``serve(database_url, kubeconfig, **settings)``."""
    servers: list[ApiServer] = []

    def start(database_url: str, kubeconfig: Path, **overrides: Any) -> ApiServer:
        server = ApiServer(make_settings(database_url, kubeconfig, **overrides), ca=tls_ca).start()
        servers.append(server)
        return server

    yield start
    for server in reversed(servers):
        server.stop()


@pytest.fixture
def api_down(serve: Callable[..., ApiServer], database_url: str, dead_kubeconfig: Path) -> ApiServer:
    """The API on both databases, with Kubernetes unreachable (submissions stay Queued)."""
    return serve(database_url, dead_kubeconfig)


@pytest.fixture
def admin(api_down: ApiServer) -> Iterator[httpx.Client]:
    with api_down.client() as client:
        yield client


def new_tenancy(admin: httpx.Client, name: str, **fields: Any) -> str:
    """Create a tenancy and return a fresh tenant token for it."""
    r = admin.post("/v1/admin/tenancies", json={"name": name, **fields})
    assert r.status_code == 201, r.text
    r = admin.post(f"/v1/admin/tenancies/{name}/tokens", json={"name": "test"})
    assert r.status_code == 201, r.text
    return r.json()["token"]


def _module_server(database_url: str, tls_ca: Any, tls_pair: tuple[Path, Path], folder: Path) -> ApiServer:
    """An API server with Kubernetes down and the per-token and per-tenancy rate limits off: a
    module's tests send their requests back to back, faster than 50/s (tests/api/test_limits.py
    starts servers of its own to test the limits)."""
    settings = Settings(
        host="127.0.0.1",
        port=0,
        tls_cert=tls_pair[0],
        tls_key=tls_pair[1],
        database_url=database_url,
        kubeconfig=write_dead_kubeconfig(folder / "kubeconfig-down"),
        admin_token=ADMIN_TOKEN,
        retry_max_seconds=1.0,
        rate_limit_token="",
        rate_limit_tenancy="",
    )
    return ApiServer(settings, ca=tls_ca).start()


@pytest.fixture(scope="module")
def module_api(
    tls_ca: Any, tls_pair: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    """One API server (SQLite, Kubernetes down) shared by a module's read-mostly tests."""
    folder = tmp_path_factory.mktemp("api")
    server = _module_server(f"sqlite:///{folder / 'api.db'}", tls_ca, tls_pair, folder)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def module_api_on_both(
    module_database_url: str, tls_ca: Any, tls_pair: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    """``module_api`` once per database backend: for a module's matrices of probes that leave
    what they probe untouched (each probe checks that it did)."""
    server = _module_server(module_database_url, tls_ca, tls_pair, tmp_path_factory.mktemp("api"))
    try:
        yield server
    finally:
        server.stop()
