"""docs/deploy.md's install steps, read from the page and run with bash: how the sandbox installs
the product (``--install helm``), and how a caller installs it on a sandbox that left it to them
(``--install none``, tests/sandbox/test_chart_install.py).

The page marks each block it means to be run with an HTML comment on the line before the
fence, ``<!-- install-step: NAME -->``; the first is ``settings``, the variables the later steps
read, which a reader fills in. Here the settings block is replaced by the sandbox's own values
of the same variables (:func:`write_settings` refuses any other set of names), written to a
file that each step's script sources first, so that every other step runs as written.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "deploy.md"
SETTINGS = "settings"
_MARK = re.compile(r"^<!-- install-step: ([a-z0-9-]+) -->\n```sh\n(.*?)^```$", re.MULTILINE | re.DOTALL)
_ASSIGNMENT = re.compile(r"^([A-Z][A-Z0-9_]*)=", re.MULTILINE)


@dataclass(frozen=True)
class Step:
    """One marked block of the page: its name and its shell text."""

    name: str
    script: str


class StepFailed(OSError):
    """A step exited non-zero; the message names it and ends with its output."""


def blocks(doc: Path = DOC) -> list[Step]:
    """Every marked block of the page, in its order; the first is the settings."""
    found = [Step(name, script) for name, script in _MARK.findall(doc.read_text())]
    marks = doc.read_text().count("<!-- install-step:")
    if not found or found[0].name != SETTINGS or len(found) != marks:
        raise ValueError(
            f"{doc}: every '<!-- install-step: NAME -->' must stand right before a ```sh block, "
            f"the first named {SETTINGS!r} ({marks} marks, {len(found)} blocks)"
        )
    return found


def setting_names(doc: Path = DOC) -> list[str]:
    """The variables the page's settings block sets, in its order."""
    return _ASSIGNMENT.findall(blocks(doc)[0].script)


def steps(doc: Path = DOC) -> list[Step]:
    """The steps that install the product, in order: every marked block after the settings."""
    return blocks(doc)[1:]


def write_settings(path: Path, settings: Mapping[str, str], doc: Path = DOC) -> Path:
    """The settings block, with ``settings``'s values, as a file a shell sources (only its owner
    reads it: it holds credentials)."""
    wanted = setting_names(doc)
    if sorted(settings) != sorted(wanted):
        raise ValueError(f"{doc}'s settings are {wanted}; given {sorted(settings)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{name}={shlex.quote(settings[name])}\n" for name in wanted))
    path.chmod(0o600)
    return path


def run_step(step: Step, settings_file: Path, kubeconfig: Path, tools: Path) -> str:
    """``step`` run by bash (``-euo pipefail``) from the repository's root, after the settings,
    with ``kubectl`` and ``helm`` taken from ``tools`` first and pointed at ``kubeconfig``;
    returns its standard output. :class:`StepFailed` when it fails."""
    script = f"set -euo pipefail\n. {shlex.quote(str(settings_file))}\n{step.script}"
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PATH": f"{tools}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip()[-3000:]
        raise StepFailed(f"docs/deploy.md's step {step.name!r} exited {done.returncode}: {output}")
    return done.stdout


def run(
    settings_file: Path, kubeconfig: Path, tools: Path, say: Callable[[str], None], doc: Path = DOC
) -> dict[str, str]:
    """Every step in order (:func:`run_step`); each one's standard output, by name."""
    outputs: dict[str, str] = {}
    for step in steps(doc):
        say(f"docs/deploy.md's step {step.name!r}, run with bash")
        outputs[step.name] = run_step(step, settings_file, kubeconfig, tools)
    return outputs
