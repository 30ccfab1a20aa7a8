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


def test_fabric_manager_truth_settings_from_env(monkeypatch) -> None:
    monkeypatch.setenv("GPUCAAS_FABRIC_FM_CONNECT_PARAMS_VERSION", "2")
    monkeypatch.setenv("GPUCAAS_FABRIC_PLATFORM", "supermicro-hgx-h100")
    monkeypatch.setenv("GPUCAAS_FABRIC_FABRIC_RESET_POLICY", "evict")
    monkeypatch.setenv("GPUCAAS_FABRIC_FM_CALL_DEADLINE_S", "2.5")
    s = FabricSettings(vm_enabled=False)
    assert (s.fm_connect_params_version, s.platform, s.fabric_reset_policy, s.fm_call_deadline_s) == (
        2,
        "supermicro-hgx-h100",
        "evict",
        2.5,
    )
    assert s.fm_backend == "nvfm"  # never the simulator unless asked for


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"fm_backend": "auto"}, "fm_backend"),
        ({"fm_connect_params_version": 3}, "fm_connect_params_version"),
        ({"fabric_reset_policy": "ignore"}, "fabric_reset_policy"),
        ({"fm_call_deadline_s": 0}, "fm_call_deadline_s"),
    ],
)
def test_bad_fabric_manager_settings_name_the_field(kw, field) -> None:
    with pytest.raises(ValueError, match=field):
        FabricSettings(vm_enabled=False, **kw)
