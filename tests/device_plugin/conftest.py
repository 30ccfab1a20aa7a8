"""Fixtures for the device plugin: settings over a fake board, the fabric double, a running plugin."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpucaas.devtools.fake_kubelet import FakeKubelet
from gpucaas.devtools.fake_sysfs import FakeBoard
from services.device_plugin.main import DevicePlugin, build
from services.device_plugin.settings import DevicePluginSettings
from tests.device_plugin.fabric_double import FabricDouble

SettingsFactory = Callable[..., DevicePluginSettings]


@pytest.fixture
def make_settings(socket_dir: Path, tmp_path: Path) -> SettingsFactory:
    def make(board: FakeBoard, **overrides: Any) -> DevicePluginSettings:
        values: dict[str, Any] = dict(
            sysfs_root=board.sysfs, dev_root=board.dev, device_plugin_dir=socket_dir / "device-plugins",
            cdi_dir=tmp_path / "cdi", fabric_socket=socket_dir / "fabric.sock",
            pod_resources_socket=socket_dir / "pod-resources" / "kubelet.sock", node_name="gpu-node-1",
            metrics_port=-1, health_interval=0.1, fabric_poll_interval=0.2, kubelet_watch_interval=0.2,
            pod_resources_interval=0.5, fabric_timeout=2.0, fabric_sync_grace=30.0,
        )
        values.update(overrides)
        if values["fabric_socket"] in ("", None):
            values.setdefault("fabric_required", False)
        return DevicePluginSettings(**values)

    return make


@pytest.fixture
def fabric(socket_dir: Path, hgx_board: FakeBoard) -> Iterator[FabricDouble]:
    double = FabricDouble(socket_dir / "fabric.sock", hgx_board.physical_id_map()).start()
    try:
        yield double
    finally:
        double.stop()


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
def plugin(hgx_board: FakeBoard, fabric: FabricDouble, fake_kubelet: FakeKubelet,
           make_settings: SettingsFactory, run_plugin: Callable[..., DevicePlugin]) -> DevicePlugin:
    """The plugin on the DGX board, fabric service up, registered with the fake kubelet."""
    p = run_plugin(make_settings(hgx_board))
    fake_kubelet.wait_for_plugin("nvidia.com/gpu")
    return p
