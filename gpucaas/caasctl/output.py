"""Rendering of caasctl results: a rich table, or JSON/YAML for scripts."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Any

import typer
import yaml
from rich.console import Console
from rich.table import Table
from rich.text import Text

# Messages are lines (URLs among them, which scripts and terminals pick out): never broken by
# rich at its idea of the width; the terminal wraps them.
err_console = Console(stderr=True, soft_wrap=True)


def _console() -> Console:
    # Made per call so that the terminal width (or $COLUMNS) of this invocation is used.
    # No emoji codes (":ab:" in a PCI address is not an emoji) and no markup in server data.
    return Console(emoji=False)


class Format(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


Column = tuple[str, Callable[[dict[str, Any]], Any]]


def _text(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value) or "-"
    return str(value)


def _cell(value: Any) -> Text:
    return Text(_text(value))  # Text, not a str: "[...]" in server data is not rich markup


def emit(data: Any, fmt: Format, columns: Sequence[Column] | None = None, title: str | None = None) -> None:
    """Print ``data`` (a row list, or one object) in the chosen format."""
    # JSON and YAML are written verbatim (no rich wrapping or colour), so that scripts can parse them.
    if fmt is Format.json:
        typer.echo(json.dumps(data, default=str, indent=2))
        return
    if fmt is Format.yaml:
        typer.echo(yaml.safe_dump(data, sort_keys=False, default_flow_style=False).rstrip())
        return
    console = _console()
    if isinstance(data, dict) and columns is None:
        table = Table(show_header=False, title=title, box=None)
        for key, value in data.items():
            table.add_row(
                Text(str(key), style="bold"), _cell(value) if not isinstance(value, dict) else Text(json.dumps(value))
            )
        console.print(table)
        return
    rows = data if isinstance(data, list) else [data]
    table = Table(title=title, header_style="bold")
    for name, _ in columns or []:
        table.add_column(name)
    for row in rows:
        table.add_row(*(_cell(get(row)) for _, get in columns or []))
    console.print(table)
