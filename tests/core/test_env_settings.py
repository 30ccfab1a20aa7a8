"""EnvSettings reads and validates the environment as pydantic-settings does: same values, same errors.

Each case sets some variables (and keyword arguments) and builds the same declaration
twice: once on :class:`core.env_settings.EnvSettings` (its own ``Field`` and
validator decorators, no pydantic), once on ``pydantic_settings.BaseSettings`` (pydantic's
``Field`` and decorators); both must give the same values, the same fields set, or the
same validation errors (type, field, message). The node daemons' own settings classes
are then checked against their pydantic-settings equivalents, and their start path
against pydantic itself: a good environment never loads it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

import pydantic
import pytest
from pydantic import ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from core import env_settings
from core.env_settings import EnvSettings, EnvSettingsConfigDict
from core.logging import LoggingSettings
from services.device_plugin.settings import DevicePluginSettings
from services.fabric.settings import FabricSettings
from services.gpu_leases.settings import LeaseAgentSettings


def _fields(api: Any) -> type:
    """Every kind of field the node daemons' settings use, with their validators, declared
    with ``api.Field``, ``api.field_validator`` and ``api.model_validator``."""

    class _Fields:
        text: str = api.Field("a", description="plain text")
        count: int = api.Field(3, ge=-1, le=65535)
        seconds: float = api.Field(1.0, gt=0)
        grace: float = api.Field(60.0, ge=0)
        ratio: float = api.Field(0.5, gt=0, lt=1)
        flag: bool = True
        root: Path = Path("/sys")
        socket_path: Path | None = Path("/run/x.sock")
        maybe_path: Path | None = None
        maybe_int: int | None = api.Field(None, ge=1, le=2)
        maybe_text: str | None = None
        mode: Literal["network", "unix", "none"] = "network"
        host: str = api.Field(default_factory=socket.gethostname, json_schema_extra={"default_text": "host"})
        level: str = "INFO"
        bdfs: str = ""

        @api.field_validator("socket_path", mode="before")
        @classmethod
        def _empty(cls, v: Any) -> Any:
            return None if v in ("", None) else v

        @api.field_validator("level", mode="before")
        @classmethod
        def _level(cls, v: object) -> str:
            text = str(v).strip().upper()
            if text not in ("INFO", "DEBUG"):
                raise ValueError(f"log level must be INFO or DEBUG, got {v!r}")
            return text

        @api.field_validator("bdfs")
        @classmethod
        def _bdfs(cls, v: str) -> str:
            if not all(len(b) == 7 for b in v.split(",") if b):
                raise AssertionError("not a bus:device.function")  # pydantic's assertion_error
            return ",".join(b for b in v.split(",") if b)

        @api.model_validator(mode="after")
        def _cross(self) -> Any:
            if self.socket_path is None and self.flag:
                raise ValueError("socket_path is empty but flag is true")
            self.root = self.root.absolute()
            return self

    return _Fields


class Lean(_fields(env_settings), EnvSettings):  # type: ignore[misc]
    model_config = EnvSettingsConfigDict(env_prefix="GPUCAAS_T_", extra="ignore")


class Reference(_fields(pydantic), BaseSettings):  # type: ignore[misc]
    model_config = SettingsConfigDict(env_prefix="GPUCAAS_T_", extra="ignore")


def _outcome(cls: type[Any], kwargs: dict[str, Any]) -> tuple[str, Any]:
    try:
        obj = cls(**kwargs)
    except ValidationError as exc:
        return "error", [(e["type"], e["loc"], e["msg"]) for e in exc.errors()]
    dump = obj.model_dump()
    return "ok", (dump, {k: type(v) for k, v in dump.items()}, sorted(obj.model_fields_set))


CASES: list[tuple[str, dict[str, str], dict[str, Any]]] = [
    ("nothing set: the defaults", {}, {}),
    (
        "every kind from the environment",
        {
            "GPUCAAS_T_TEXT": "b",
            "GPUCAAS_T_COUNT": "9402",
            "GPUCAAS_T_SECONDS": "0.5",
            "GPUCAAS_T_GRACE": "0",
            "GPUCAAS_T_FLAG": "false",
            "GPUCAAS_T_ROOT": "/tmp/sys",
            "GPUCAAS_T_SOCKET_PATH": "",
            "GPUCAAS_T_MAYBE_PATH": "rel/dir",
            "GPUCAAS_T_MAYBE_INT": "2",
            "GPUCAAS_T_MAYBE_TEXT": "",
            "GPUCAAS_T_MODE": "unix",
            "GPUCAAS_T_HOST": "node-a",
            "GPUCAAS_T_LEVEL": "debug",
            "GPUCAAS_T_BDFS": "01:00.0,,02:00.0",
        },
        {},
    ),
    ("names are case-insensitive", {"gpucaas_t_count": "7", "Gpucaas_T_Mode": "none"}, {}),
    ("booleans as pydantic reads them", {"GPUCAAS_T_FLAG": "Yes"}, {}),
    *[
        (f"boolean {text!r}", {"GPUCAAS_T_FLAG": text}, {})
        for text in ("1", "0", "on", "OFF", "t", "F", "y", "n", "TRUE", "False", "no", " true", "")
    ],
    *[
        (f"integer {text!r}", {"GPUCAAS_T_COUNT": text}, {})
        for text in ("0", "-1", "-0", "0042", "65535", "65536", "-2", "1_000", "5.0", "", "99999999999999999999")
    ],
    *[
        (f"float {text!r}", {"GPUCAAS_T_SECONDS": text, "GPUCAAS_T_RATIO": text}, {})
        for text in ("1", "0.25", "-0.5", "0", ".5", "5.", "1e-3", "inf", "nan", "0012.50", "1,5", "")
    ],
    ("numbers with spaces and signs", {"GPUCAAS_T_COUNT": " +12 ", "GPUCAAS_T_SECONDS": "1e-3"}, {}),
    ("paths: relative, spaces, empty", {"GPUCAAS_T_ROOT": "rel", "GPUCAAS_T_MAYBE_PATH": " a b "}, {}),
    ("an empty path", {"GPUCAAS_T_ROOT": "", "GPUCAAS_T_MAYBE_PATH": ""}, {}),
    ("a choice in another case", {"GPUCAAS_T_MODE": "Unix"}, {}),
    ("keyword arguments win over the environment", {"GPUCAAS_T_COUNT": "7", "GPUCAAS_T_TEXT": "env"}, {"count": 8}),
    (
        "keyword arguments of every type",
        {},
        {
            "text": "t",
            "count": 5,
            "seconds": 2,
            "grace": 0.0,
            "ratio": 0.75,
            "flag": False,
            "root": Path("/r"),
            "socket_path": None,
            "maybe_path": Path("p"),
            "maybe_int": 1,
            "mode": "none",
            "host": "h",
            "level": "info",
            "bdfs": "",
        },
    ),
    (
        "keyword arguments pydantic converts",
        {},
        {"count": True, "seconds": True, "flag": 1, "root": "x", "maybe_int": 2.0, "text": b"bytes"},
    ),
    (
        "keyword arguments pydantic refuses",
        {},
        {"text": 5, "count": 1.5, "flag": "maybe", "mode": 1, "root": 3, "seconds": float("nan")},
    ),
    ("unrelated and unknown variables are ignored", {"GPUCAAS_T_NOPE": "1", "GPUCAAS_COUNT": "x"}, {}),
    ("unknown keyword arguments are ignored", {}, {"nope": 1}),
    ("not an integer", {"GPUCAAS_T_COUNT": "nine"}, {}),
    ("a fraction for an integer", {"GPUCAAS_T_COUNT": "1.5"}, {}),
    (
        "out of range",
        {"GPUCAAS_T_COUNT": "70000", "GPUCAAS_T_SECONDS": "0", "GPUCAAS_T_GRACE": "-1", "GPUCAAS_T_RATIO": "1"},
        {},
    ),
    ("not a number", {"GPUCAAS_T_SECONDS": "soon"}, {}),
    ("not a boolean", {"GPUCAAS_T_FLAG": "maybe"}, {}),
    ("not a choice", {"GPUCAAS_T_MODE": "tcp"}, {}),
    ("an empty optional integer", {"GPUCAAS_T_MAYBE_INT": ""}, {}),
    ("a field validator's message", {"GPUCAAS_T_LEVEL": "loud"}, {}),
    ("a field validator's assertion", {"GPUCAAS_T_BDFS": "01:00.0,x"}, {}),
    ("a model validator's message", {"GPUCAAS_T_SOCKET_PATH": ""}, {}),
    ("a bad keyword argument", {}, {"seconds": -2.0}),
    ("several errors at once", {"GPUCAAS_T_COUNT": "x", "GPUCAAS_T_MODE": "tcp", "GPUCAAS_T_LEVEL": "loud"}, {}),
]


@pytest.mark.parametrize(("env", "kwargs"), [(e, k) for _, e, k in CASES], ids=[c[0] for c in CASES])
def test_same_values_and_errors_as_pydantic_settings(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], kwargs: dict[str, Any]
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert _outcome(Lean, kwargs) == _outcome(Reference, kwargs)


#: (class, environment) pairs for the daemons' own classes: good and bad values of their fields
DAEMON_CASES: list[tuple[type[EnvSettings], dict[str, str]]] = [
    (DevicePluginSettings, {}),
    (
        DevicePluginSettings,
        {
            "GPUCAAS_SYSFS_ROOT": "sys",
            "GPUCAAS_FABRIC_SOCKET": "",
            "GPUCAAS_FABRIC_REQUIRED": "no",
            "GPUCAAS_METRICS_PORT": "-1",
            "GPUCAAS_NODE_NAME": "gpu-node-a",
            "GPUCAAS_FABRIC_TIMEOUT": "0.2",
            "GPUCAAS_RESOURCE_NAME": "example.com/vgpu",
        },
    ),
    (DevicePluginSettings, {"GPUCAAS_FABRIC_SOCKET": ""}),
    (DevicePluginSettings, {"GPUCAAS_METRICS_PORT": "lots", "GPUCAAS_FABRIC_TIMEOUT": "0"}),
    (DevicePluginSettings, {"GPUCAAS_RESOURCE_NAME": "kubernetes.io/gpu", "GPUCAAS_CDI_KIND": "gpu"}),
    (LeaseAgentSettings, {}),
    (LeaseAgentSettings, {"GPUCAAS_LEASES": "true", "GPUCAAS_KUBECONFIG": "/k", "GPUCAAS_LEASE_INTERVAL": "0.1"}),
    (LeaseAgentSettings, {"GPUCAAS_LEASE_INTERVAL": "0", "GPUCAAS_GPU_RESET": "sometimes"}),
    (LoggingSettings, {}),
    (LoggingSettings, {"GPUCAAS_LOG_LEVEL": " debug", "GPUCAAS_LOG_FORMAT": "json"}),
    (LoggingSettings, {"GPUCAAS_LOG_LEVEL": "loud", "GPUCAAS_LOG_FORMAT": "xml"}),
    (FabricSettings, {"GPUCAAS_FABRIC_VM_ENABLED": "false"}),
    (FabricSettings, {}),
    (
        FabricSettings,
        {
            "GPUCAAS_FABRIC_DISK_IMAGE": "/i.qcow2",
            "GPUCAAS_FABRIC_NVSWITCHES": "0000:05:00.0,6:0.0",
            "GPUCAAS_FABRIC_MEMORY_CONTROLLER": "0000:07:00.0",
            "GPUCAAS_FABRIC_FM_BACKEND": "simulator",
            "GPUCAAS_FABRIC_FM_CONNECT_PARAMS_VERSION": "2",
            "GPUCAAS_FABRIC_SOCKET_MODE": "432",
        },
    ),
    (
        FabricSettings,
        {
            "GPUCAAS_FABRIC_VM_ENABLED": "false",
            "GPUCAAS_FABRIC_NVSWITCHES": "zz",
            "GPUCAAS_FABRIC_VCPUS": "0",
            "GPUCAAS_FABRIC_FM_CALL_DEADLINE_S": "121",
        },
    ),
    (FabricSettings, {"GPUCAAS_FABRIC_VM_ENABLED": "false", "GPUCAAS_FABRIC_KERNEL": "/vmlinuz"}),
]


@pytest.mark.parametrize(
    ("cls", "env"), DAEMON_CASES, ids=[f"{c.__name__}-{i}" for i, (c, _) in enumerate(DAEMON_CASES)]
)
def test_the_daemons_settings_read_as_their_pydantic_settings_equivalents(
    monkeypatch: pytest.MonkeyPatch, cls: type[EnvSettings], env: dict[str, str]
) -> None:
    for name in list(os.environ):
        if name.startswith("GPUCAAS_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert _outcome(cls, {}) == _outcome(cls.pydantic_model(BaseSettings), {})


def test_the_pydantic_equivalent_keeps_the_declaration() -> None:
    model = DevicePluginSettings.pydantic_model()
    assert model.__name__ == "DevicePluginSettings" and list(model.model_fields) == list(
        DevicePluginSettings.model_fields
    )
    for name, info in DevicePluginSettings.model_fields.items():
        theirs = model.model_fields[name]
        assert (theirs.annotation, theirs.description, theirs.is_required()) == (
            info.annotation,
            info.description,
            info.is_required(),
        )
        assert theirs.get_default(call_default_factory=True) == info.get_default(call_default_factory=True)


def test_a_structured_aliased_or_pydantic_field_is_refused() -> None:
    with pytest.raises(TypeError, match="not list"):

        class _List(EnvSettings):
            items: list[str] = []

    with pytest.raises(TypeError, match="no alias"):

        class _Alias(EnvSettings):
            name: str = pydantic.Field("x", validation_alias="OTHER")

    with pytest.raises(TypeError, match="no ValidationInfo"):

        class _Info(EnvSettings):
            name: str = "x"

            @env_settings.field_validator("name")
            @classmethod
            def _check(cls, v: str, info: Any) -> str:
                return v


def test_the_validators_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison above is not vacuous: both classes run the shared validators."""
    monkeypatch.setenv("GPUCAAS_T_LEVEL", "loud")
    for cls in (Lean, Reference):
        with pytest.raises(ValidationError, match="log level must be INFO or DEBUG"):
            cls()


def test_a_good_environment_never_loads_pydantic() -> None:
    """The point of the class: a daemon whose settings are fine does not import pydantic (7.5 MB)."""
    code = (
        "import sys, json\n"
        "from gpucaas import gpu_node\n"
        "from services.fabric import cli\n"
        "from services.device_plugin.settings import DevicePluginSettings\n"
        "from services.fabric.settings import FabricSettings\n"
        "from services.gpu_leases.settings import LeaseAgentSettings\n"
        "from core.logging import LoggingSettings\n"
        "for cls in (DevicePluginSettings, FabricSettings, LeaseAgentSettings, LoggingSettings): cls()\n"
        "gpu_node.command.build_settings({'node_name': 'n', 'metrics_port': '-1'})\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('pydantic'))))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUCAAS_")}
    env |= {"GPUCAAS_FABRIC_VM_ENABLED": "false", "GPUCAAS_LEASES": "true", "GPUCAAS_LOG_LEVEL": "debug"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert json.loads(run.stdout) == []


@pytest.mark.parametrize(
    "case",
    [
        "nothing set: the defaults",
        "every kind from the environment",
        "booleans as pydantic reads them",
        "keyword arguments of every type",
    ],
)
def test_plain_values_are_decided_without_pydantic(monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    """The comparisons above are not all pydantic's answers twice: plain values never reach it."""
    _, env, kwargs = next(c for c in CASES if c[0] == case)
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    def refuse(cls: type, base: type | None = None) -> type:
        raise AssertionError("pydantic asked")

    monkeypatch.setattr(Lean, "pydantic_model", classmethod(refuse))
    assert _outcome(Lean, kwargs)[0] == "ok"
