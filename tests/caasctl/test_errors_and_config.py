"""caasctl's contract with scripts: exit codes (0 ok, 1 error with one line on stderr, 2 usage),
where the connection settings come from (flag > environment > config file), and TLS checks.

A few runs go through the installed ``caasctl`` console script in a subprocess, so the entry
point, its exit codes and its stderr are what a shell sees."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.api.harness import ADMIN_TOKEN, ApiServer

from .conftest import Caasctl, clean_env, invoke


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- settings --------------------------------------------------------------------------------
def test_no_url_and_no_token(no_config: dict[str, str], api: ApiServer) -> None:
    r = invoke(["nodes"], no_config)
    assert r.exit_code == 1 and r.stdout == ""
    assert one_line(r.stderr) == (
        "error: no API URL: pass --url, set GPUCAAS_URL, or put url: in ~/.config/gpucaas/config.yaml"
    )
    r = invoke(["tenancies", "list"], {**no_config, "GPUCAAS_URL": api.base_url})
    assert r.exit_code == 1
    assert one_line(r.stderr) == "error: no token: pass --token, set GPUCAAS_TOKEN, or put token: in the config file"


def test_config_file_then_env_then_flags(api: ApiServer, ca_file: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"url": api.base_url, "token": "wrong-token", "ca_cert": str(ca_file)}))
    env = {"GPUCAAS_CONFIG": str(cfg)}
    assert invoke(["tenancies", "list"], env).exit_code == 1  # the file's token is refused: 401
    ok = invoke(["tenancies", "list", "-o", "json"], {**env, "GPUCAAS_TOKEN": ADMIN_TOKEN})  # env beats file
    assert ok.exit_code == 0, ok.stderr
    assert isinstance(ok.json(), list)
    flag = invoke(["--token", "wrong-again", "tenancies", "list"], {**env, "GPUCAAS_TOKEN": ADMIN_TOKEN})
    assert flag.exit_code == 1 and one_line(flag.stderr).startswith("error: 401: ")  # flag beats env
    by_flag = invoke(["--config", str(cfg), "--token", ADMIN_TOKEN, "tenancies", "list", "-o", "json"], {})
    assert by_flag.exit_code == 0, by_flag.stderr


def test_bad_config_files(tmp_path: Path, no_config: dict[str, str]) -> None:
    r = invoke(["--config", str(tmp_path / "missing.yaml"), "nodes"], no_config)
    assert r.exit_code == 1 and "missing.yaml does not exist" in one_line(r.stderr)
    broken = tmp_path / "broken.yaml"
    broken.write_text("url: [unclosed\n")
    r = invoke(["nodes"], {"GPUCAAS_CONFIG": str(broken)})
    assert r.exit_code == 1 and one_line(r.stderr).startswith(f"error: config file {broken} is not valid YAML")
    listed = tmp_path / "list.yaml"
    listed.write_text("- url\n")
    r = invoke(["nodes"], {"GPUCAAS_CONFIG": str(listed)})
    assert r.exit_code == 1 and "must be a mapping" in one_line(r.stderr)
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text("nodes: [gpu-node-a]\n")
    r = invoke(["partitions", "list", "--node", "gpu-node-a"], {"GPUCAAS_CONFIG": str(nodes)})
    assert r.exit_code == 1 and "nodes must be a mapping" in one_line(r.stderr)


# --- the API answering or not ------------------------------------------------------------------
def test_unreachable_api(no_config: dict[str, str]) -> None:
    url = f"https://127.0.0.1:{closed_port()}"
    r = invoke(["tenancies", "list"], {**no_config, "GPUCAAS_URL": url, "GPUCAAS_TOKEN": ADMIN_TOKEN})
    assert r.exit_code == 1 and r.stdout == ""
    assert one_line(r.stderr).startswith(f"error: cannot reach the API at {url}")


def test_tls_is_verified(api: ApiServer, no_config: dict[str, str], tmp_path: Path) -> None:
    env = {**no_config, "GPUCAAS_URL": api.base_url, "GPUCAAS_TOKEN": ADMIN_TOKEN}
    untrusted = invoke(["tenancies", "list"], env)  # the test CA is not in the system's trust store
    assert untrusted.exit_code == 1 and "CERTIFICATE_VERIFY_FAILED" in one_line(untrusted.stderr)
    insecure = invoke(["--insecure", "tenancies", "list", "-o", "json"], env)
    assert insecure.exit_code == 0, insecure.stderr
    bad_ca = tmp_path / "not-a-cert.pem"
    bad_ca.write_text("hello\n")
    r = invoke(["--ca-cert", str(bad_ca), "tenancies", "list"], env)
    assert r.exit_code == 1 and one_line(r.stderr).startswith(f"error: CA certificate {bad_ca} cannot be loaded")


def test_unknown_tenancy_is_404(caasctl: Caasctl) -> None:
    for args in (
        ["tenancies", "describe", "nope"],
        ["tenancies", "delete", "nope", "--yes"],
        ["tokens", "issue", "nope"],
        ["tokens", "list", "nope"],
    ):
        r = caasctl(*args)
        assert r.exit_code == 1 and r.stdout == "", args
        assert one_line(r.stderr) == "error: 404: tenancy 'nope' not found", args


# --- usage errors: exit 2 ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "args",
    [
        ["no-such-command"],
        ["tenancies", "describe"],  # missing NAME
        ["tenancies", "list", "-o", "xml"],  # not table|json|yaml
        ["partitions", "activate", "three"],  # not an integer
        ["tenancies", "create", "x", "--gpu-quota", "many"],
        ["gpus", "quarantine", "gpu-node-a"],  # missing PCI_ADDRESS
        ["--no-such-flag", "nodes"],
    ],
)
def test_usage_errors_exit_2(args: list[str], no_config: dict[str, str]) -> None:
    r = invoke(args, no_config)
    assert r.exit_code == 2, (args, r.stdout, r.stderr)
    assert r.stdout == ""


def test_every_command_has_help_and_the_output_option() -> None:
    commands = [
        ["partitions", "list"],
        ["partitions", "activate"],
        ["partitions", "deactivate"],
        ["nodes"],
        ["gpus"],
        ["gpus", "quarantine"],
        ["gpus", "release"],
        ["leases"],
        ["tenancies", "create"],
        ["tenancies", "list"],
        ["tenancies", "describe"],
        ["tenancies", "delete"],
        ["tokens", "issue"],
        ["tokens", "list"],
        ["tokens", "revoke"],
        ["tokens", "create"],
        ["audit"],
        ["containers", "list"],
        ["containers", "describe"],
        ["containers", "cancel"],
    ]
    for cmd in commands:
        r = invoke([*cmd, "--help"], {})
        assert r.exit_code == 0, cmd
        assert "--output" in r.stdout and "table" in r.stdout, cmd
    assert "--follow" in invoke(["containers", "logs", "--help"], {}).stdout  # plain text: no -o
    root = invoke(["--help"], {}).stdout
    for env in ("GPUCAAS_URL", "GPUCAAS_TOKEN", "GPUCAAS_CA_CERT", "GPUCAAS_CONFIG"):
        assert f"[env: {env}" in root, env  # not eaten as rich markup


# --- the installed console script -------------------------------------------------------------------
def test_console_script_exit_codes(caasctl_bin: Path, api: ApiServer, ca_file: Path, tmp_path: Path) -> None:
    env = clean_env(HOME=str(tmp_path), COLUMNS="200")  # no ~/.config/gpucaas of this machine

    def sh(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(caasctl_bin), *args], env={**env, **extra}, capture_output=True, text=True, timeout=120, check=False
        )

    ok = sh(
        "tenancies",
        "list",
        "-o",
        "json",
        GPUCAAS_URL=api.base_url,
        GPUCAAS_TOKEN=ADMIN_TOKEN,
        GPUCAAS_CA_CERT=str(ca_file),
    )
    assert ok.returncode == 0, ok.stderr
    assert isinstance(json.loads(ok.stdout), list)

    no_url = sh("nodes")
    assert no_url.returncode == 1 and no_url.stdout == ""
    assert one_line(no_url.stderr).startswith("error: no API URL")

    denied = sh("--url", api.base_url, "--token", "bad", "--ca-cert", str(ca_file), "nodes")
    assert denied.returncode == 1 and one_line(denied.stderr).startswith("error: 401: ")

    usage = sh("tenancies", "list", "-o", "xml")
    assert usage.returncode == 2 and "xml" in usage.stderr


def test_each_setting_flag_over_env_over_file_over_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpucaas.caasctl.settings import CaasctlSettings

    for name in ("GPUCAAS_URL", "GPUCAAS_TOKEN", "GPUCAAS_CA_CERT", "GPUCAAS_INSECURE", "GPUCAAS_FABRIC_SOCKET"):
        monkeypatch.delenv(name, raising=False)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "url": "https://file",
                "token": "file-token",
                "insecure": True,
                "nodes": {"gpu-node-a": {"fabric_socket": "/tmp/a.sock"}},
            }
        )
    )
    monkeypatch.setenv("GPUCAAS_CONFIG", str(cfg))
    from_file = CaasctlSettings.load()
    assert (from_file.url, from_file.token_value, from_file.insecure) == ("https://file", "file-token", True)
    assert from_file.fabric_sockets == {"gpu-node-a": "/tmp/a.sock"}
    assert from_file.ca_cert is None and from_file.fabric_socket == "/run/gpucaas/fabric.sock"  # defaults
    monkeypatch.setenv("GPUCAAS_URL", "https://env")
    monkeypatch.setenv("GPUCAAS_INSECURE", "false")
    from_env = CaasctlSettings.load()
    assert (from_env.url, from_env.token_value, from_env.insecure) == ("https://env", "file-token", False)
    from_flag = CaasctlSettings.load(url="https://flag", token="flag-token")
    assert (from_flag.url, from_flag.token_value) == ("https://flag", "flag-token")
    assert "flag-token" not in repr(from_flag)  # a secret in repr would end up in tracebacks
