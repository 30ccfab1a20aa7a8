"""The chart hands the device plugin its golden firmware: leases on by default, a ConfigMap the
plugin's own loader accepts, a warning when it is empty, and malformed values refused."""

from __future__ import annotations

import helm_python
import pytest

from devtools.fake_sysfs import GOLDEN_ROM_VERSION, golden_rom_sha256
from services.gpu_leases.firmware import GoldenTable
from tests.deploy.rendering import pod_spec, render, render_notes, workloads

GOLDEN = {"0x2330": {"sha256": [golden_rom_sha256()], "versions": [GOLDEN_ROM_VERSION]}}


def _plugin(objects):
    ds = next(
        w
        for w in workloads(objects)
        if w["kind"] == "DaemonSet" and w["metadata"]["labels"]["app.kubernetes.io/component"] == "device-plugin"
    )
    return pod_spec(ds)["containers"][0]


def test_golden_values_reach_the_plugin_as_a_file_it_loads() -> None:
    objects = render({"devicePlugin": {"firmware": {"golden": GOLDEN}}})
    container = _plugin(objects)
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["GPUCAAS_LEASES"] == "true"
    assert env["GPUCAAS_FIRMWARE_GOLDEN_FILE"] == "/etc/gpucaas/firmware/golden.json"
    mount = next(m for m in container["volumeMounts"] if m["name"] == "firmware-golden")
    assert mount["mountPath"] == "/etc/gpucaas/firmware" and mount["readOnly"] is True
    cm = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("firmware-golden"))
    table = GoldenTable.from_json(cm["data"]["golden.json"])
    assert table.by_device_id["0x2330"].sha256 == {golden_rom_sha256()}
    assert "firmware.golden is empty" not in render_notes({"devicePlugin": {"firmware": {"golden": GOLDEN}}})


def test_empty_golden_values_warn_and_fail_safe() -> None:
    objects = render()
    cm = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("firmware-golden"))
    assert GoldenTable.from_json(cm["data"]["golden.json"]).by_device_id == {}
    assert "firmware.golden is empty" in render_notes()


def test_leases_off_is_said_out_loud() -> None:
    values = {"devicePlugin": {"leases": {"enabled": False}}}
    env = {e["name"]: e.get("value") for e in _plugin(render(values))["env"]}
    assert env["GPUCAAS_LEASES"] == "false" and "GPUCAAS_FIRMWARE_GOLDEN_FILE" not in env
    assert "without a\nfirmware check" in render_notes(values)


@pytest.mark.parametrize(
    "golden",
    [{"2330": {"sha256": ["0" * 64]}}, {"0x2330": {"sha256": ["not-hex"]}}, {"0x2330": {"versions": ["1"]}}],
    ids=["bad-id", "bad-sha", "no-sha"],
)
def test_malformed_golden_values_are_refused(golden) -> None:
    with pytest.raises(helm_python.HelmValuesError):
        render({"devicePlugin": {"firmware": {"golden": golden}}})
