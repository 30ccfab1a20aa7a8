"""FabricSettings: env prefix, list parsing, cross-field checks naming the field."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.fabric.settings import FabricSettings


def test_env_prefix_and_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCAAS_FABRIC_NVSWITCHES", "05:00.0, 0000:06:00.0")
    monkeypatch.setenv("GPUCAAS_FABRIC_DOMAIN_TYPE", "qemu")
    monkeypatch.setenv("GPUCAAS_FABRIC_DISK_IMAGE", "/img.qcow2")
    s = FabricSettings()
    assert s.nvswitch_addresses == ["0000:05:00.0", "0000:06:00.0"]
    assert FabricSettings(disk_image="/d", nvswitches=["05:00.0"]).nvswitches == "0000:05:00.0"
    assert s.domain_type == "qemu"


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"nvswitches": ["5:0"], "disk_image": "/d"}, "nvswitches"),
        ({"memory_controller": "zz", "disk_image": "/d"}, "memory_controller"),
        ({"kernel": "/k", "disk_image": "/d"}, "kernel and initrd"),
        ({}, "disk_image"),
        ({"domain_type": "xen", "disk_image": "/d"}, "domain_type"),
        ({"restart_backoff_initial_s": 10, "restart_backoff_max_s": 1, "disk_image": "/d"}, "restart_backoff_max_s"),
    ],
    ids=["nvswitch", "memory-controller", "kernel-alone", "no-boot-source", "domain-type", "backoff"],
)
def test_bad_settings_name_the_field(kw: dict, field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        FabricSettings(**kw)


def test_no_vm_needs_no_image() -> None:
    assert FabricSettings(vm_enabled=False).disk_image is None
