"""Fixtures for the device plugin: settings over a fake board, the node's real fabric service
(``services.fabric`` with the Fabric Manager simulator, on its unix socket), a running plugin."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from core.fabric_client import FabricClient
from devtools.fake_sysfs import FakeBoard
from services.device_plugin.main import DevicePlugin, build
from services.device_plugin.settings import DevicePluginSettings
from services.fabric.bookkeeping import ActivationStore
from services.fabric.fabric_manager.simulator import SimulatedFabric, SimulatedFabricManager
from services.fabric.partitions import PartitionService
from services.fabric.server import UnixServer, create_app
from tests.fixtures.fake_kubelet import FakeKubelet

SettingsFactory = Callable[..., DevicePluginSettings]


@pytest.fixture
def make_settings(socket_dir: Path, tmp_path: Path) -> SettingsFactory:
    def make(board: FakeBoard, **overrides: Any) -> DevicePluginSettings:
        values: dict[str, Any] = dict(
            sysfs_root=board.sysfs,
            dev_root=board.dev,
            device_plugin_dir=socket_dir / "device-plugins",
            cdi_dir=tmp_path / "cdi",
            fabric_socket=socket_dir / "fabric.sock",
            pod_resources_socket=socket_dir / "pod-resources" / "kubelet.sock",
            node_name="gpu-node-1",
            metrics_port=-1,
            health_interval=0.1,
            fabric_poll_interval=0.2,
            kubelet_watch_interval=0.2,
            pod_resources_interval=0.5,
            fabric_timeout=2.0,
            fabric_sync_grace=30.0,
            allocate_fabric_wait=0.5,
        )
        values.update(overrides)
        if values["fabric_socket"] in ("", None):
            values.setdefault("fabric_required", False)
        return DevicePluginSettings(**values)

    return make


@dataclass
class RunningFabric:
    """The node's fabric service as the plugin meets it: its socket, and the simulated Fabric
    Manager behind it (``fm``), whose switches the tests flip (stop, NVLink failures)."""

    socket: Path
    fm: SimulatedFabric

    def activations(self) -> dict[str, dict[str, Any]]:
        """What the service holds, read over its HTTP API: holder -> activation."""
        with FabricClient(self.socket) as client:
            return {a["holder"]: a for a in client.activations()}


@pytest.fixture
def fabric(socket_dir: Path, hgx_board: FakeBoard, tmp_path: Path) -> Iterator[RunningFabric]:
    """The real fabric service (services/fabric: FastAPI over the unix socket the plugin's
    settings name, PartitionService, its activation records) on the board's FM simulator."""
    fm = SimulatedFabric(hgx_board.physical_id_map())
    store = ActivationStore(tmp_path / "fabric-state").open()
    server = UnixServer(create_app(PartitionService(SimulatedFabricManager(fm), store)), socket_dir / "fabric.sock")
    server.start()
    try:
        yield RunningFabric(socket_dir / "fabric.sock", fm)
    finally:
        server.stop()
        store.close()


@pytest.fixture
def run_plugin() -> Iterator[Callable[[DevicePluginSettings], DevicePlugin]]:
    started: list[DevicePlugin] = []

    def run(settings: DevicePluginSettings, **kw: Any) -> DevicePlugin:
        plugin = build(settings, **kw)
        plugin.start()
        started.append(plugin)
        return plugin

    yield run
    for plugin in reversed(started):
        plugin.stop()


@pytest.fixture
def plugin(
    hgx_board: FakeBoard,
    fabric: RunningFabric,
    fake_kubelet: FakeKubelet,
    make_settings: SettingsFactory,
    run_plugin: Callable[..., DevicePlugin],
) -> DevicePlugin:
    """The plugin on the DGX board, fabric service up, registered with the fake kubelet."""
    p = run_plugin(make_settings(hgx_board))
    fake_kubelet.wait_for_plugin("nvidia.com/gpu")
    return p
