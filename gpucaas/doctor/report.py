"""The verdict over all checks, and how it is shown (a table or JSON)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import IO, Any

from gpucaas.doctor.checks import CheckResult

_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}
_MARK = {"ok": "OK", "warn": "WARN", "fail": "FAIL", "skip": "SKIP"}


def blocking(results: Sequence[CheckResult]) -> list[CheckResult]:
    """The failed checks: each of them keeps GPU containers off this node."""
    return [r for r in results if r.status == "fail"]


def exit_code(results: Sequence[CheckResult]) -> int:
    """0 when GPU containers can run here (warnings allowed), 1 when something blocks them."""
    return 1 if blocking(results) else 0


def as_dict(results: Sequence[CheckResult]) -> dict[str, Any]:
    counts = {s: sum(1 for r in results if r.status == s) for s in ("ok", "warn", "fail", "skip")}
    return {"ready": not blocking(results), "counts": counts, "checks": [r.as_dict() for r in results]}


def write_json(results: Sequence[CheckResult], out: IO[str]) -> None:
    out.write(json.dumps(as_dict(results), indent=2) + "\n")


def write_table(results: Sequence[CheckResult], out: IO[str], *, verbose: bool = False, width: int = 120) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=out, width=width, soft_wrap=False, highlight=False)
    table = Table(show_lines=False, expand=False)
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("result")
    for r in results:
        text = r.summary
        if r.hint and r.status in ("fail", "warn"):
            text += f"\n[italic]fix:[/italic] {_escape(r.hint)}"
        if verbose and r.details:
            text += "\n" + "\n".join(f"  {_escape(d)}" for d in r.details)
        table.add_row(r.id, f"[{_STYLE[r.status]}]{_MARK[r.status]}[/]", text if "[italic]" in text else _escape(text))
    console.print(table)
    failed = blocking(results)
    if failed:
        console.print(
            f"[bold red]{len(failed)} check(s) block GPU containers on this node:[/] " + ", ".join(r.id for r in failed)
        )
    else:
        warned = sum(1 for r in results if r.status == "warn")
        console.print("[green]this node can run GPU containers[/]" + (f" ({warned} warning(s))" if warned else ""))


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
