"""`gpucaas device-plugin` and `gpucaas fabric` start without the other services' imports
(node daemons stay under 60 MB): no web framework, ORM, official Kubernetes client or
HTTP client package is loaded, and the options and help are the full CLI's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HEAVY = ("fastapi", "uvicorn", "sqlalchemy", "kubernetes", "httpx", "kopf")


@pytest.mark.parametrize("command", ["device-plugin", "fabric"])
def test_node_daemon_commands_load_only_their_own_code(command: str) -> None:
    code = (
        "import json, sys\n"
        "from gpucaas.entry import main\n"
        "try:\n"
        f"    main([{command!r}, '--help'])\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "else:\n"
        "    code = 0\n"
        f"print(json.dumps({{'code': code, 'loaded': [m for m in {HEAVY!r} if m in sys.modules]}}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"code": 0, "loaded": []}
    assert f"gpucaas {command}" in out.stdout and "--log-level" in out.stdout


def test_other_commands_and_the_command_list_use_the_full_cli() -> None:
    out = subprocess.run([sys.executable, "-m", "gpucaas", "--help"], capture_output=True, text=True, check=True)
    for command in ("api", "controller", "device-plugin", "fabric", "sandbox"):
        assert command in out.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "gpucaas", "device-plugin", "--no-such-option"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "No such option" in bad.stderr


@pytest.mark.parametrize(
    ("command", "env", "flag"),
    [
        ("device-plugin", {"GPUCAAS_METRICS_PORT": "lots"}, "--metrics-port (GPUCAAS_METRICS_PORT)"),
        ("device-plugin", {"GPUCAAS_LEASE_INTERVAL": "0"}, "--lease-interval (GPUCAAS_LEASE_INTERVAL)"),
        ("device-plugin", {"GPUCAAS_LOG_FORMAT": "xml"}, "--log-format (GPUCAAS_LOG_FORMAT)"),
        (
            "fabric",
            {"GPUCAAS_FABRIC_FM_BACKEND": "simulator", "GPUCAAS_FABRIC_VCPUS": "0"},
            "--vcpus (GPUCAAS_FABRIC_VCPUS)",
        ),
    ],
)
def test_a_bad_environment_value_stops_the_daemon_with_one_line(command: str, env: dict[str, str], flag: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "gpucaas", command],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
    )
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"gpucaas {command}: invalid {flag}: "), run.stderr


#: how the chart, the sandbox and benchmarks.footprint start the daemons, and other plain forms
PLAIN_ARGS = {
    "device-plugin": [
        [],
        [
            "--device-plugin-dir",
            "/tmp/dp",
            "--cdi-dir",
            "/tmp/cdi",
            "--pod-resources-socket",
            "/tmp/pr.sock",
            "--metrics-port",
            "-1",
            "--node-name",
            "gpu-node-a",
        ],
        [
            "--leases",
            "--no-fabric-required",
            "--fabric-socket=",
            "--fabric-timeout",
            "0.25",
            "--log-format=json",
            "--log-level",
            "debug",
            "--lease-interval",
            "2",
            "--kubeconfig",
            "/k",
        ],
    ],
    "fabric": [
        ["--fm-backend", "simulator", "--no-vm-enabled", "--vcpus", "4", "--node-name", "n1", "--socket-mode", "0660"],
    ],
}
#: what typer must handle (help, errors, forms typer reads its own way)
NOT_PLAIN = [
    ["--help"],
    ["--metrics-port", "lots"],
    ["--metrics-port", " 5"],
    ["--leases=true"],
    ["--node-name"],
    ["--node-name", "a", "--node-name", "b"],
    ["--log-format", "xml"],
    ["extra"],
    ["--fabric-timeout", "1e-3"],
    ["--node-name", "--leases"],
    ["--no-such-option"],
]


def _commands() -> dict[str, object]:
    from gpucaas.gpu_node import command as device_plugin
    from services.fabric.cli import command as fabric

    return {"device-plugin": device_plugin, "fabric": fabric}


@pytest.mark.parametrize(("name", "args"), [(n, a) for n, runs in PLAIN_ARGS.items() for a in runs])
def test_plain_options_are_what_typer_passes(name: str, args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Without typer, the same settings objects as with it (the command's own function is replaced)."""
    import typer
    from typer.testing import CliRunner

    from core.settings_cli import settings_command

    for var in list(os.environ):
        if var.startswith("GPUCAAS_"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("GPUCAAS_FABRIC_DISK_IMAGE", "/i.qcow2")  # the fabric service's one required setting
    real = _commands()[name]
    seen: list[list[dict[str, object]]] = []
    capture = settings_command(*real.settings_sections, name=name)(  # type: ignore[attr-defined]
        lambda *built: seen.append([s.model_dump() for s in built])
    )
    app = typer.Typer()

    @app.callback()
    def _group() -> None:
        """the group"""

    app.command(name)(capture)
    result = CliRunner().invoke(app, [name, *args])
    assert result.exit_code == 0, result.output
    assert capture.run_plain(args)
    assert len(seen) == 2 and seen[0] == seen[1]


@pytest.mark.parametrize("args", NOT_PLAIN, ids=[" ".join(a) or "-" for a in NOT_PLAIN])
def test_anything_else_is_left_to_typer(args: list[str]) -> None:
    assert _commands()["device-plugin"].plain_options(args) is None  # type: ignore[attr-defined]


def test_a_plain_start_loads_no_typer() -> None:
    """typer, click and rich: memory a started daemon has no use for (core.settings_cli)."""
    code = (
        "import json, sys\n"
        "from gpucaas.gpu_node import command\n"
        f"given = command.plain_options({PLAIN_ARGS['device-plugin'][2]!r})\n"
        "command.build_settings(given)\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'typer', 'click', 'rich'})))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUCAAS_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert json.loads(out.stdout) == []
