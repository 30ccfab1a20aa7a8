"""The node configuration in deploy/containerd and deploy/kata says what the docs claim."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tests.deploy.rendering import REPO, render

DEPLOY = REPO / "deploy"
RUNTIME = "kata-qemu-nvidia-gpu"


@pytest.mark.parametrize(
    ("name", "version", "cri_table"),
    [
        ("kata-qemu-nvidia-gpu.toml", 2, "io.containerd.grpc.v1.cri"),
        ("kata-qemu-nvidia-gpu.v3.toml", 3, "io.containerd.cri.v1.runtime"),
    ],
    ids=["containerd-1.7", "containerd-2"],
)
def test_containerd_drop_in(name: str, version: int, cri_table: str) -> None:
    config = tomllib.loads((DEPLOY / "containerd" / name).read_text())
    assert config["version"] == version
    cri = config["plugins"][cri_table]
    assert cri["enable_cdi"] is True
    assert "/var/run/cdi" in cri["cdi_spec_dirs"]
    runtime = cri["containerd"]["runtimes"][RUNTIME]
    assert runtime["runtime_type"] == "io.containerd.kata-qemu-nvidia-gpu.v2"
    assert runtime["privileged_without_host_devices"] is True
    assert runtime["options"]["ConfigPath"].endswith("configuration-qemu-nvidia-gpu.toml")


def test_chart_runtime_class_handler_is_the_containerd_runtime() -> None:
    rc = next(o for o in render({}) if o["kind"] == "RuntimeClass")
    config = tomllib.loads((DEPLOY / "containerd" / "kata-qemu-nvidia-gpu.toml").read_text())
    assert rc["handler"] in config["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]


def test_kata_configuration_attacks_slow_gpu_boots() -> None:
    config = tomllib.loads((DEPLOY / "kata" / "configuration-qemu-nvidia-gpu.toml").read_text())
    qemu = config["hypervisor"]["qemu"]
    assert qemu["enable_hugepages"] is True and qemu["memory_preallocate"] is True
    assert qemu["cold_plug_vfio"] == "root-port" and qemu["hot_plug_vfio"] == "no-port"
    assert qemu["pcie_root_port"] >= 8
    assert qemu["hotplug_vfio_on_root_bus"] is False
    assert qemu["machine_type"] == "q35"
    assert qemu["enable_iommu"] is False
    assert qemu["enable_annotations"] == []
    assert config["runtime"]["static_sandbox_resource_mgmt"] is True
    assert config["runtime"]["vfio_mode"] == "guest-kernel"
    assert config["agent"]["kata"]["dial_timeout"] >= 120


def test_every_kata_setting_is_explained() -> None:
    """Each key the Kata overrides set has its reasoning in deploy/kata/README.md."""
    config = tomllib.loads((DEPLOY / "kata" / "configuration-qemu-nvidia-gpu.toml").read_text())
    readme = (DEPLOY / "kata" / "README.md").read_text()
    keys = [
        k
        for section in (config["hypervisor"]["qemu"], config["runtime"], config["agent"]["kata"])
        for k in section
        if k
        not in (
            "path",
            "image",
            "kernel_params",
            "default_memory",
            "default_maxmemory",
            "default_vcpus",
            "default_maxvcpus",
        )
    ]
    missing = [k for k in keys if f"`{k}`" not in readme and k not in readme]
    assert missing == []


def test_doc_files_exist() -> None:
    for path in ("containerd/README.md", "kata/README.md", "values-production.yaml"):
        assert (DEPLOY / path).is_file(), path
    assert Path(REPO / "docs" / "deploy.md").is_file()
