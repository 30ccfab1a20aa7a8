"""caasctl's configuration: one pydantic-settings class with a YAML file source.

Precedence: command-line flag > environment variable (``GPUCAAS_URL``,
``GPUCAAS_TOKEN``, ``GPUCAAS_CA_CERT``, ``GPUCAAS_INSECURE``) > the config file > the
default. The file is ``--config``, else ``GPUCAAS_CONFIG``, else
``~/.config/gpucaas/config.yaml``; a file named by the flag must exist, the others
may be absent. Its keys are the field names::

    url: https://gpucaas.example.com
    token: <admin or tenant token>
    ca_cert: /etc/gpucaas/ca.pem
    insecure: false
    nodes:
      gpu-node-a: {fabric_socket: /run/gpucaas/fabric.sock}

The file is read by pydantic-settings' ``YamlConfigSettingsSource``; only its
errors (not YAML, not a mapping) are turned into one clear line here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import AliasChoices, BaseModel, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from gpucaas.caasctl.errors import CaasctlError

DEFAULT_CONFIG = Path("~/.config/gpucaas/config.yaml")


class ConfigLocation(BaseSettings):
    """Where the config file is: ``--config`` > ``GPUCAAS_CONFIG`` > the default."""

    model_config = SettingsConfigDict(extra="ignore")

    config: Path = Field(
        DEFAULT_CONFIG, validation_alias=AliasChoices("GPUCAAS_CONFIG"), description="caasctl's config file (YAML)."
    )


class NodeConfig(BaseModel):
    fabric_socket: str | None = Field(None, description="The node's fabric service socket (as reachable from here).")


class _CheckedYaml(YamlConfigSettingsSource):
    """The YAML source, with one-line errors naming the file."""

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        try:
            data = yaml.safe_load(Path(file_path).read_text()) or {}
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
            raise CaasctlError(
                f"config file {file_path} is not valid YAML: {getattr(exc, 'problem', None) or exc}{where}"
            ) from exc
        except OSError as exc:
            raise CaasctlError(f"config file {file_path} cannot be read: {exc.strerror or exc}") from exc
        if not isinstance(data, dict):
            raise CaasctlError(f"config file {file_path} must be a mapping with url, token, ca_cert")
        return data


class CaasctlSettings(BaseSettings):
    """Where caasctl reaches the API and the nodes' fabric sockets."""

    model_config = SettingsConfigDict(env_prefix="GPUCAAS_", extra="ignore")

    url: str | None = Field(None, description="API base URL, e.g. https://gpucaas.example.com.")
    token: SecretStr | None = Field(
        None,
        description="Bearer token: an admin token, or a tenant token for run, ps, logs, "
        "cancel, usage, secrets, registry, webhooks.",
    )
    ca_cert: str | None = Field(None, description="CA bundle to trust (PEM).")
    insecure: bool = Field(False, description="Skip TLS verification (development only).")
    nodes: dict[str, NodeConfig] = Field(
        default_factory=dict, description="Per node: {fabric_socket: path} (config file only)."
    )
    fabric_socket: str = Field(
        "/run/gpucaas/fabric.sock",
        validation_alias=AliasChoices("GPUCAAS_FABRIC_SOCKET"),
        description="This node's fabric socket, used when the node has no entry in nodes.",
    )

    @field_validator("nodes", mode="before")
    @classmethod
    def _nodes(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError("nodes must be a mapping of node name to {fabric_socket: path}")
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, env_settings, _CheckedYaml(settings_cls)

    @property
    def fabric_sockets(self) -> dict[str, str]:
        return {name: node.fabric_socket for name, node in self.nodes.items() if node.fabric_socket}

    @property
    def token_value(self) -> str | None:
        return self.token.get_secret_value() if self.token is not None else None

    @classmethod
    def load(cls, *, config_path: str | None = None, **flags: Any) -> CaasctlSettings:
        """flag > env > file > default; ``flags`` left ``None`` (or ``False``) were not given."""
        given: dict[str, Any] = {"GPUCAAS_CONFIG": config_path} if config_path else {}
        path = ConfigLocation(**given).config.expanduser()
        if config_path and not path.exists():
            raise CaasctlError(f"config file {path} does not exist")
        bound = type(cls.__name__, (cls,), {"model_config": {**cls.model_config, "yaml_file": path}})
        given = {k: v for k, v in flags.items() if v not in (None, False)}
        try:
            return bound(**given)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err.get("loc", ()))
            msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
            raise CaasctlError(f"configuration (flags, GPUCAAS_*, {path}): {field}: {msg}") from None
