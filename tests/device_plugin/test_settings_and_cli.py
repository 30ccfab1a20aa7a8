"""Settings (env prefix GPUCAAS_, validation), the CLI wiring, and the generated stubs."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from gpucaas.cli import app
from services.device_plugin.api import build
from services.device_plugin.settings import DevicePluginSettings


def test_env_vars(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPUCAAS_SYSFS_ROOT", str(tmp_path / "sys"))
    monkeypatch.setenv("GPUCAAS_RESOURCE_NAME", "gpucaas.dev/h100")
    monkeypatch.setenv("GPUCAAS_FABRIC_SOCKET", "")
    monkeypatch.setenv("GPUCAAS_FABRIC_REQUIRED", "false")
    monkeypatch.setenv("GPUCAAS_METRICS_PORT", "-1")
    s = DevicePluginSettings()
    assert s.sysfs_root == tmp_path / "sys"
    assert s.resource_name == "gpucaas.dev/h100"
    assert s.fabric_socket is None and s.fabric_required is False and s.metrics_port == -1
    assert s.cdi_kind == "nvidia.com/gpu" and s.cdi_dir == Path("/var/run/cdi")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("resource_name", "gpu", "resource_name must be 'domain/name'"),
        ("cdi_kind", "NVIDIA/gpu", "cdi_kind must be 'vendor.domain/class'"),
        ("cdi_kind", "nvidia.com/gpu/x", "cdi_kind must be"),
        ("metrics_port", 70000, "less than or equal to 65535"),
    ],
    ids=["resource", "kind-case", "kind-slashes", "port"],
)
def test_invalid_values_name_the_field(field: str, value, message: str) -> None:
    with pytest.raises(ValidationError, match=message) as err:
        DevicePluginSettings(**{field: value})
    assert err.value.errors()[0]["loc"][0] == field


def test_no_fabric_socket_requires_opting_out() -> None:
    with pytest.raises(ValidationError, match="fabric_required=false"):
        DevicePluginSettings(fabric_socket="")


def test_cli_rejects_bad_option_clearly() -> None:
    result = CliRunner().invoke(app, ["device-plugin", "--resource-name", "gpu", "--metrics-port", "-1"])
    assert result.exit_code == 2
    assert "invalid --resource-name" in result.output and "domain/name" in result.output


def test_cli_options_each_have_an_env_var() -> None:
    import typer.main

    cmd = typer.main.get_command(app).commands["device-plugin"]  # type: ignore[attr-defined]
    helps = {p.opts[0]: p.help for p in cmd.params}
    for name in (
        "sysfs-root",
        "dev-root",
        "device-plugin-dir",
        "cdi-dir",
        "resource-name",
        "cdi-kind",
        "fabric-socket",
        "pod-resources-socket",
        "node-name",
        "metrics-port",
    ):
        assert helps[f"--{name}"].endswith("[env: GPUCAAS_" + name.upper().replace("-", "_") + "]")


def test_stubs_generate_into_a_fresh_folder(tmp_path: Path) -> None:
    out = build.generate(tmp_path / "generated")
    assert build.is_current(out)
    grpc_stub = (out / "deviceplugin" / "v1beta1" / "api_pb2_grpc.py").read_text()
    assert "from . import api_pb2 as" in grpc_stub
    assert (out / "podresources" / "v1" / "api_pb2.py").exists()
