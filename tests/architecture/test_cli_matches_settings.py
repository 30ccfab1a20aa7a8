"""Every ``gpucaas <command> --help`` option is a settings field with the same default.

The options are generated from the settings classes (core/settings_cli.py);
these tests read the real click commands the ``gpucaas`` entry point serves and
check them against the classes from the outside: each option names a field, says
its env var, shows the default the class itself produces, and giving no option
builds exactly the object the class builds from the environment alone.
"""

from __future__ import annotations

import os
from pathlib import Path

import click
import pytest
import typer.main
from typer.testing import CliRunner

from gpucaas.cli import app

#: Options that are not configuration (what to do this once), per command.
NOT_SETTINGS = {
    "doctor": {"--check", "--output", "--verbose"},
    "sandbox": {"--demo"},
}
#: Values a class requires (a field without default, or a cross-field check).
REQUIRED = {
    "fabric": {"disk_image": "/var/lib/gpucaas/images/fm.qcow2"},
}

GROUP = typer.main.get_command(app)
COMMANDS = sorted(n for n in GROUP.commands if n != "version")  # type: ignore[attr-defined]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("GPUCAAS_") or name == "KUBECONFIG":
            monkeypatch.delenv(name)


def _callback(name: str):
    return GROUP.commands[name].callback  # type: ignore[attr-defined]


def _options(name: str) -> dict[str, click.Option]:
    cmd = GROUP.commands[name]  # type: ignore[attr-defined]
    return {p.opts[0]: p for p in cmd.params if isinstance(p, click.Option)}


def test_every_service_command_is_generated_from_settings() -> None:
    for name in COMMANDS:
        assert hasattr(_callback(name), "settings_sections"), f"gpucaas {name}: options not generated from settings"


@pytest.mark.parametrize("name", COMMANDS)
def test_each_option_is_a_field_with_its_env_var_and_default(name: str, clean_env: None) -> None:
    callback = _callback(name)
    by_flag = {o.flag: o for o in callback.settings_options}
    sections = callback.settings_sections
    for flag, option in _options(name).items():
        if flag in NOT_SETTINGS.get(name, set()):
            continue
        assert flag in by_flag, f"gpucaas {name} {flag}: no settings field behind it"
        setting = by_flag[flag]
        cls = sections[setting.section].cls
        info = cls.model_fields[setting.field]
        # the option never supplies a value of its own: unset, the class decides
        assert option.default is None, f"{flag} has a CLI-side default {option.default!r}"
        assert all(env in option.help for env in setting.env), f"{flag}: help does not name {setting.env}"
        # the default shown is the class's own default
        if "default_text" in (info.json_schema_extra or {}):
            continue  # computed at run time (e.g. the host name); the help says how
        required = REQUIRED.get(name, {})
        actual = getattr(cls(**{k: v for k, v in required.items() if k in cls.model_fields}), setting.field)
        shown = option.show_default
        assert isinstance(shown, str), flag
        if actual is None:
            assert shown == "unset", flag
        elif isinstance(actual, bool):
            assert shown == str(actual).lower(), flag
        elif isinstance(actual, (int, float, str, Path)):
            assert type(actual)(shown if shown != '""' else "") == actual, (
                f"{flag}: shows {shown}, class has {actual!r}"
            )
        else:  # lists, mappings: shown as the JSON the env var takes
            import json

            parsed = json.loads(shown)
            assert parsed == (list(actual) if isinstance(actual, tuple) else actual), flag


@pytest.mark.parametrize("name", COMMANDS)
def test_no_options_builds_what_the_class_builds(name: str, clean_env: None) -> None:
    callback = _callback(name)
    required = REQUIRED.get(name, {})
    built = callback.build_settings(dict(required))
    for section, obj in zip(callback.settings_sections, built, strict=True):
        expected = section.cls(**{k: v for k, v in required.items() if k in section.cls.model_fields})
        assert obj.model_dump() == expected.model_dump()


def test_flag_beats_env_beats_default(clean_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    build = _callback("fabric").build_settings
    disk = {"disk_image": "/var/lib/gpucaas/images/fm.qcow2"}
    fabric, logs = build({**disk})
    assert fabric.vcpus == 2 and logs.format == "text"
    monkeypatch.setenv("GPUCAAS_FABRIC_VCPUS", "4")
    monkeypatch.setenv("GPUCAAS_LOG_FORMAT", "json")
    fabric, logs = build({**disk})
    assert fabric.vcpus == 4 and logs.format == "json"
    fabric, logs = build({**disk, "vcpus": 8, "log_format": "text"})
    assert fabric.vcpus == 8 and logs.format == "text"


def test_list_flags_take_the_env_vars_json(clean_env: None) -> None:
    build = _callback("controller").build_settings
    controller, timers, warm, _ = build(
        {
            "node_cidrs": '["203.0.113.0/24"]',
            "dns_labels": '{"app": "dns"}',
            "gpu_leases": False,
            "warm_images_from_chart": '["busybox:1.36"]',
        }
    )
    assert controller.node_cidrs == ["203.0.113.0/24"] and controller.dns_labels == {"app": "dns"}
    assert timers.gpu_leases is False
    assert warm.warm_images_from_chart == ["busybox:1.36"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["controller", "--node-cidrs", "not json"], "gpucaas controller: invalid --node-cidrs: not JSON"),
        (
            ["controller", "--node-cidrs", '["nope"]'],
            "gpucaas controller: invalid --node-cidrs (GPUCAAS_CONTROLLER_NODE_CIDRS): "
            "node_cidrs: 'nope' is not a CIDR",
        ),
        (
            ["fabric", "--vcpus", "0", "--no-vm-enabled", "--fm-backend", "simulator"],
            "gpucaas fabric: invalid --vcpus (GPUCAAS_FABRIC_VCPUS): Input should be greater than or equal to 1",
        ),
        (
            ["api", "--log-level", "LOUD"],
            "gpucaas api: invalid --log-level (GPUCAAS_LOG_LEVEL): log level must be one of",
        ),
    ],
    ids=["not-json", "bad-cidr", "range", "log-level"],
)
def test_bad_values_exit_2_naming_flag_and_env(args: list[str], message: str, clean_env: None) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert message in result.output


def test_secrets_get_no_flag(clean_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A command line is visible to every user of the node (ps): secrets come from the env only."""
    assert "--admin-token" not in _options("api")
    monkeypatch.setenv("GPUCAAS_ADMIN_TOKEN", "a-real-random-secret-0123456789")
    api_settings, _ = _callback("api").build_settings({})
    assert api_settings.admin_token.get_secret_value() == "a-real-random-secret-0123456789"


def test_an_empty_path_flag_reaches_the_class_as_empty(clean_env: None) -> None:
    """``--fabric-socket ''`` disables the fabric service (the class maps "" to None), not a socket at '.'."""
    result = CliRunner().invoke(app, ["device-plugin", "--fabric-socket", "", "--metrics-port", "-1"])
    assert result.exit_code == 2 and "fabric_required=false" in result.output
    plugin, _leases, _logs = _callback("device-plugin").build_settings({"fabric_socket": "", "fabric_required": False})
    assert plugin.fabric_socket is None


def test_the_sandbox_starts_as_many_nodes_as_its_setting_says_by_default(clean_env: None) -> None:
    from devtools.sandbox import nodes, runner
    from devtools.sandbox.settings import SandboxSettings

    assert nodes.DEFAULT_NODES == nodes.node_names(SandboxSettings().real_nodes)
    assert runner.start.__kwdefaults__["nodes"] == nodes.DEFAULT_NODES
