"""README.md is assembled from docs/readme/*.md and keeps the two set-up commands."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_is_built_from_its_sections() -> None:
    result = subprocess.run([sys.executable, "docs/build_readme.py", "--check"], cwd=ROOT, check=False)
    assert result.returncode == 0, "README.md is stale: run `python docs/build_readme.py`"


def test_readme_has_the_two_setup_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert "make sandbox   # install everything, then run the whole control plane on this machine" in text
    assert "make test      # install everything, then run the full test suite" in text
