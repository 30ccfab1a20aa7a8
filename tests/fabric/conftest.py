"""Fixtures of the fabric service tests: the FM simulator, the records, the service and its API."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from core.fabric_client import FabricClient
from services.fabric.bookkeeping import ActivationStore
from services.fabric.fabric_manager.simulator import SimulatedFabric, SimulatedFabricManager
from services.fabric.partitions import PartitionService
from services.fabric.server import UnixServer, create_app


@pytest.fixture
def fabric() -> SimulatedFabric:
    """One simulated Fabric Manager (HGX H100 table, the fake board's GPU map)."""
    return SimulatedFabric()


@pytest.fixture
def fm(fabric: SimulatedFabric) -> SimulatedFabricManager:
    return SimulatedFabricManager(fabric)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ActivationStore]:
    s = ActivationStore(tmp_path / "state").open()
    yield s
    s.close()


@pytest.fixture
def service(fm: SimulatedFabricManager, store: ActivationStore) -> PartitionService:
    return PartitionService(fm, store)


@pytest.fixture
def socket_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # unix socket paths are limited to 107 bytes: a short pytest temp dir, not tmp_path.
    return tmp_path_factory.mktemp("sock") / "fabric.sock"


@pytest.fixture
def api(service: PartitionService, socket_path: Path) -> Iterator[UnixServer]:
    server = UnixServer(create_app(service), socket_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def client(api: UnixServer) -> Iterator[FabricClient]:
    with FabricClient(api.socket_path, timeout=30) as c:
        yield c


def missing_prerequisite(why: str) -> NoReturn:
    """In CI (``CI`` set, as GitHub Actions and most runners do) a missing libvirtd or test
    image is a failure, as a missing PostgreSQL is (tests/fixtures/db.py): `make test`
    installs both, so their absence there is a broken set-up, not a reason to skip.
    Elsewhere (a developer's machine without them) the test skips, saying why."""
    if os.environ.get("CI"):
        pytest.fail(
            f"{why} (CI is set: the libvirtd tests must run; `make test` installs their prerequisites)", pytrace=False
        )
    pytest.skip(why)


@pytest.fixture(scope="session")
def libvirtd():
    """A private libvirtd + virtlogd (session mode, started here, stopped by PID)."""
    from vm_images.test_image.daemon import DaemonUnavailable, PrivateLibvirtd

    daemon = PrivateLibvirtd()
    try:
        daemon.start()
    except DaemonUnavailable as exc:
        missing_prerequisite(f"libvirtd with QEMU unavailable: {exc}")
    yield daemon
    daemon.stop()


@pytest.fixture(scope="session")
def test_image():
    """The kernel + busybox initramfs the libvirtd tests boot (built once, cached)."""
    from vm_images.test_image import ImageBuildError, build_test_image

    try:
        return build_test_image()
    except ImageBuildError as exc:
        missing_prerequisite(f"test image cannot be built here: {exc}")
