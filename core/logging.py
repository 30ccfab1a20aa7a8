"""The one logging set-up every gpucaas process uses.

Two formats, chosen by ``GPUCAAS_LOG_FORMAT`` (or ``--log-format``):

- ``text``: one human line per record, for terminals and the sandbox's log files;
- ``json``: one JSON object per line (``time``, ``level``, ``logger``, ``message``,
  plus ``exc_info`` and any ``extra=`` fields), for a cluster's log collector. The
  encoding is python-json-logger's (``pythonjsonlogger.json.JsonFormatter``), so a
  message holding quotes, backslashes or newlines is still one valid JSON document.

``GPUCAAS_LOG_LEVEL`` (or ``--log-level``) sets the root level. Calling
:func:`configure_logging` again replaces the handler it installed before (and only
that one: handlers others attached, such as pytest's, are left alone).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import IO, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")


class LoggingSettings(BaseSettings):
    """Logging of every gpucaas process; each field is ``GPUCAAS_LOG_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="GPUCAAS_LOG_", extra="ignore")

    level: str = Field("INFO", description="Log level: DEBUG, INFO, WARNING, ERROR or CRITICAL.")
    format: Literal["text", "json"] = Field(
        "text", description="text: human lines for a terminal; json: one JSON object per line (in a cluster)."
    )

    @field_validator("level", mode="before")
    @classmethod
    def _level(cls, value: object) -> str:
        text = str(value).strip().upper()
        if text not in _LEVELS:
            raise ValueError(f"log level must be one of {', '.join(_LEVELS)}, got {value!r}")
        return text


def formatter(fmt: Literal["text", "json"]) -> logging.Formatter:
    """The formatter for ``fmt``."""
    if fmt == "json":
        from pythonjsonlogger.json import JsonFormatter

        return JsonFormatter(
            "{asctime}{levelname}{name}{message}",
            style="{",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
        )
    return logging.Formatter(TEXT_FORMAT)


def configure_logging(
    settings: LoggingSettings | None = None,
    *,
    level: str | None = None,
    stream: IO[str] | None = None,
    quieter: Mapping[str, int] | None = None,
) -> logging.Handler:
    """Install the process's log handler on the root logger; ``level`` overrides the settings'.

    ``quieter`` gives named loggers (a chatty library's) levels of their own, unless the level
    is DEBUG: then every logger speaks."""
    settings = settings or LoggingSettings()
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_gpucaas", False)]:
        root.removeHandler(old)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter(settings.format))
    handler._gpucaas = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    effective = (level or settings.level).upper()
    root.setLevel(effective)
    if effective != "DEBUG":
        for name, own in (quieter or {}).items():
            logging.getLogger(name).setLevel(own)
    return handler
