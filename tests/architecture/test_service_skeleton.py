"""Every service has the same skeleton, and services meet only through the programs floor, by import.

A newcomer finds where any service starts in the same four files: ``main.py`` (build and
run), ``cli.py`` (its command-line options), ``settings.py`` and ``errors.py``. Where
several services share a process, the wiring is in ``gpucaas`` and imports
them by name in ``import`` statements, which import-linter sees: no service reaches
another through ``importlib`` or ``__import__``, which it would not.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVICES = sorted(p for p in (ROOT / "services").iterdir() if (p / "__init__.py").is_file())
SKELETON = ("main.py", "cli.py", "settings.py", "errors.py")


def test_there_are_services() -> None:
    assert {p.name for p in SERVICES} >= {
        "api",
        "tenancy_controller",
        "device_plugin",
        "gpu_leases",
        "fabric",
        "placement",
        "dra_driver",
    }


@pytest.mark.parametrize("service", SERVICES, ids=lambda p: p.name)
def test_every_service_has_the_skeleton(service: Path) -> None:
    missing = [name for name in SKELETON if not (service / name).is_file()]
    assert not missing, f"services/{service.name} lacks {', '.join(missing)}"


#: Dynamic loading that stays inside its own service, with the reason.
ALLOWED = {
    # an Alembic revision reads an earlier revision's trigger definitions: a file of its own
    # folder whose name ("0006_...") is not an importable module name
    "services/api/migrations/versions/0009_container_counts.py": {"import importlib.util", "spec_from_file_location"},
}


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _loading_by_name(path: Path, service: str) -> list[str]:
    """What in one module loads code by name: importlib, ``__import__``, and any string naming another service."""
    tree = ast.parse(path.read_text(), filename=str(path))
    docstrings = _docstrings(tree)
    others = tuple(f"services.{p.name}" for p in SERVICES if p.name != service)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name.split(".")[0] == "importlib"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "importlib":
            found.append(f"from {node.module} import")
        elif isinstance(node, ast.Name) and node.id == "__import__":
            found.append("__import__")
        elif isinstance(node, ast.Attribute) and node.attr in (
            "import_module",
            "spec_from_file_location",
            "find_spec",
            "__import__",
        ):
            found.append(node.attr)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and any(other in node.value for other in others)
        ):
            found.append(f"the name {node.value!r}")
    return found


def test_no_service_loads_another_by_name() -> None:
    """A module loaded by name is an import that import-linter's contracts never see."""
    offenders = {}
    for service in SERVICES:
        for path in sorted(service.rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            hits = [h for h in _loading_by_name(path, service.name) if h not in ALLOWED.get(rel, set())]
            if hits:
                offenders[rel] = hits
    assert not offenders, f"services load code by name (wire them in gpucaas, by import): {offenders}"


def test_the_check_finds_what_it_forbids(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('''"""Docstrings may name services.gpu_leases."""
import importlib
HANDLERS = ("services.tenancy_controller.handlers", "services.gpu_leases.controller")
m = importlib.import_module(HANDLERS[1])
n = __import__("os")
''')
    assert _loading_by_name(sample, "tenancy_controller") == [
        "import importlib",
        "the name 'services.gpu_leases.controller'",
        "import_module",
        "__import__",
    ]
