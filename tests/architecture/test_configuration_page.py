"""docs/configuration.md is generated from the settings classes and is up to date."""

from __future__ import annotations

import re
from pathlib import Path

import typer.main

from gpucaas import config_docs
from gpucaas.cli import app


def test_committed_page_is_current() -> None:
    assert config_docs.main(["--check"]) == 0, "run: python -m gpucaas.config_docs"


def test_every_command_and_option_is_on_the_page() -> None:
    page = config_docs.PAGE.read_text()
    group = typer.main.get_command(app)
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        if not hasattr(command.callback, "settings_sections"):
            continue
        assert f"## gpucaas {name}\n" in page
        for option in command.callback.settings_options:
            assert f"`{option.flag}`" in page and f"`{option.env[0]}`" in page, (name, option.flag)


def test_check_notices_a_stale_page(tmp_path: Path) -> None:
    stale = tmp_path / "configuration.md"
    stale.write_text(re.sub(r"`8443`", "`9999`", config_docs.render(), count=1))
    assert config_docs.main(["--check", "--output", str(stale)]) == 1
    assert config_docs.main(["--output", str(stale)]) == 0
    assert config_docs.main(["--check", "--output", str(stale)]) == 0
