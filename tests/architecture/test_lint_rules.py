"""The tools that keep the house rules are wired in: `make test` runs ruff and mypy before pytest,
and ruff, with the project's configuration, refuses what the rules forbid."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUFF = Path(sys.executable).with_name("ruff")

SORTED = '''"""A module."""

import json
import os

from core import crds

print(json, os, crds)
'''


def _ruff_check(source: str, filename: str = "services/example.py") -> subprocess.CompletedProcess[str]:
    """``ruff check`` on ``source`` as if it were ``filename`` in the repository (its settings apply)."""
    command = [str(RUFF), "check", "--no-cache", "--output-format", "concise", "--stdin-filename", filename, "-"]
    return subprocess.run(command, input=source, cwd=ROOT, capture_output=True, text=True, check=False)


def test_a_sorted_module_passes() -> None:
    result = _ruff_check(SORTED)
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_unsorted_import_fails() -> None:
    unsorted = SORTED.replace("import json\nimport os\n", "import os\nimport json\n")
    result = _ruff_check(unsorted)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "I001" in result.stdout


def test_a_first_party_import_among_the_third_party_ones_fails() -> None:
    mixed = SORTED.replace("import os\n\nfrom core import crds\n", "import os\nfrom core import crds\n")
    result = _ruff_check(mixed)
    assert result.returncode == 1 and "I001" in result.stdout, result.stdout + result.stderr


def test_a_noqa_naming_a_rule_nothing_checks_fails() -> None:
    result = _ruff_check(SORTED.replace("print(json, os, crds)", "print(json, os, crds)  # noqa: S101"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "RUF100" in result.stdout


def test_bugbear_is_on() -> None:
    source = SORTED + "\n\ndef f(x: list[int] = []) -> None:\n    print(x)\n"
    result = _ruff_check(source)
    assert result.returncode == 1 and "B006" in result.stdout, result.stdout + result.stderr


def test_make_test_lints_before_pytest() -> None:
    makefile = (ROOT / "Makefile").read_text()
    lint = re.search(r"^lint:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert lint is not None, "no lint target"
    steps = lint.group(1)
    assert "ruff check" in steps and "ruff format --check" in steps and "mypy" in steps
    test = re.search(r"^test:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert test is not None, "no test target"
    recipe = [line.strip() for line in test.group(1).splitlines()]
    lints = [n for n, line in enumerate(recipe) if line.endswith(" lint")]
    tests = [n for n, line in enumerate(recipe) if "pytest" in line]
    assert lints and tests and lints[0] < tests[0], recipe
