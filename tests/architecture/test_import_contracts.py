"""The layering STYLE.md sets (services independent, core below them, caasctl a REST client) holds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_linter_contracts_are_kept() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint), "--config", str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert " 0 broken." in result.stdout


def test_every_arrow_between_top_level_folders_points_down() -> None:
    """Drawn from the imports, the floors are folders: no top-level folder both imports from
    another and is imported by it (``services`` in particular), so the arrows between folders
    form one order, bottom ``core`` to top ``benchmarks``."""
    import grimp

    folders = ["core", "services", "devtools", "gpucaas", "benchmarks", "vm_images"]
    graph = grimp.build_graph(*folders, cache_dir=None)
    arrows: set[tuple[str, str]] = set()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            here, there = module.split(".")[0], imported.split(".")[0]
            if here != there:
                arrows.add((here, there))
    both_ways = sorted((a, b) for a, b in arrows if (b, a) in arrows)
    assert both_ways == [], both_ways
    importers_of_services = {a for a, b in arrows if b == "services"}
    imported_by_services = {b for a, b in arrows if a == "services"}
    assert importers_of_services & imported_by_services == set()
    assert imported_by_services <= {"core", "vm_images"}, imported_by_services
    order = ["core", "vm_images", "services", "gpucaas", "devtools", "benchmarks"]
    upward = sorted((a, b) for a, b in arrows if a in order and b in order and order.index(a) < order.index(b))
    assert upward == [], upward
