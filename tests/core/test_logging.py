"""The core's logging set-up: real JSON lines whatever the message holds, text for terminals."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys

import pytest
from pydantic import ValidationError

from core.logging import LoggingSettings, configure_logging


@pytest.fixture
def root_logger():
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield root
    for h in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(h)
    root.setLevel(level)


def test_json_lines_survive_quotes_newlines_and_tracebacks(root_logger: logging.Logger) -> None:
    out = io.StringIO()
    configure_logging(LoggingSettings(format="json"), stream=out)
    log = logging.getLogger("gpucaas.test")
    tricky = 'pod "a\\b" said {"x": 1}\nsecond line\ttab'
    log.info("message: %s", tricky)
    try:
        raise RuntimeError('boom "quoted"')
    except RuntimeError:
        log.exception("failed")
    log.warning("with extra", extra={"node": 'gpu-"a"'})
    lines = out.getvalue().splitlines()
    assert len(lines) == 3  # one JSON object per record: the newline in the message is escaped
    first, second, third = (json.loads(line) for line in lines)
    assert first["message"] == f"message: {tricky}"
    assert first["level"] == "INFO" and first["logger"] == "gpucaas.test" and first["time"]
    assert second["level"] == "ERROR" and 'RuntimeError: boom "quoted"' in second["exc_info"]
    assert third["node"] == 'gpu-"a"'


def test_text_format_for_terminals(root_logger: logging.Logger) -> None:
    out = io.StringIO()
    configure_logging(LoggingSettings(format="text", level="warning"), stream=out)
    logging.getLogger("gpucaas.test").info("not shown")
    logging.getLogger("gpucaas.test").warning("shown")
    assert out.getvalue().rstrip().endswith("WARNING gpucaas.test: shown")
    assert "not shown" not in out.getvalue()


def test_a_chatty_library_is_quieter_unless_at_debug(root_logger: logging.Logger) -> None:
    chatty = logging.getLogger("gpucaas.test.chatty")
    try:
        configure_logging(LoggingSettings(), stream=io.StringIO(), quieter={chatty.name: logging.WARNING})
        assert chatty.level == logging.WARNING and root_logger.level == logging.INFO
        chatty.setLevel(logging.NOTSET)
        configure_logging(LoggingSettings(level="debug"), stream=io.StringIO(), quieter={chatty.name: logging.WARNING})
        assert chatty.level == logging.NOTSET and chatty.isEnabledFor(logging.DEBUG)
    finally:
        chatty.setLevel(logging.NOTSET)


def test_configuring_again_replaces_only_its_own_handler(root_logger: logging.Logger) -> None:
    foreign = logging.NullHandler()
    root_logger.addHandler(foreign)
    configure_logging(LoggingSettings(), stream=io.StringIO())
    configure_logging(LoggingSettings(format="json"), stream=io.StringIO())
    ours = [h for h in root_logger.handlers if getattr(h, "_gpucaas", False)]
    assert len(ours) == 1 and foreign in root_logger.handlers
    root_logger.removeHandler(foreign)


def test_env_chooses_format_and_level(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCAAS_LOG_FORMAT", "json")
    monkeypatch.setenv("GPUCAAS_LOG_LEVEL", "debug")
    settings = LoggingSettings()
    assert settings.format == "json" and settings.level == "DEBUG"
    monkeypatch.setenv("GPUCAAS_LOG_FORMAT", "xml")
    with pytest.raises(ValidationError, match="format"):
        LoggingSettings()


def test_a_process_logs_json_when_told(tmp_path) -> None:
    """A real gpucaas process (the scheduler extender) started with GPUCAAS_LOG_FORMAT=json writes JSON lines."""
    env = {**os.environ, "GPUCAAS_LOG_FORMAT": "json", "GPUCAAS_LOG_LEVEL": "INFO"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from gpucaas.cli import app; app()",
            "scheduler-extender",
            "--port",
            "0",
            "--host",
            "127.0.0.1",
        ],
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # the first record: the effective settings (a dict full of quotes)
        record = json.loads(line)
        assert record["logger"].startswith("services.placement")
        assert record["message"].startswith("configuration: {")
    finally:
        proc.terminate()
        proc.wait()
