"""The documentation site builds with `mkdocs build --strict`: a broken link or anchor, a page
missing from the nav or any other warning fails `make test`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_docs_site_builds_strictly(tmp_path: Path) -> None:
    mkdocs = Path(sys.executable).with_name("mkdocs")
    result = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "index.html").exists()
    assert (tmp_path / "site" / "design" / "index.html").exists()
