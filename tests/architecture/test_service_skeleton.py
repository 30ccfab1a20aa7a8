"""Every service has the same skeleton, and services meet only through the programs floor, by import.

A newcomer finds where any service starts in the same four files: ``main.py`` (build and
run), ``cli.py`` (its command-line options), ``settings.py`` and ``errors.py``. Where
several services share a process, the wiring is in ``gpucaas`` and imports
them by name in ``import`` statements, which import-linter sees: no service reaches
another through ``importlib`` or ``__import__``, which it would not.

The files have the same shape too: ``main.py`` has one entry, ``run`` (a service that runs
itself) or ``build`` (one a program runs beside another); ``cli.py`` holds the command the
``gpucaas`` CLI registers, or, for a service sharing a process, the options a command of
``gpucaas`` composes; and logging is set up in one place, ``core.logging.configure_logging``,
called by that command, never by a service's own code.
"""

from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path
from types import ModuleType

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


ENTRIES = {"run", "build"}


def _functions(path: Path) -> set[str]:
    """The module-level functions of one file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


@pytest.mark.parametrize("service", SERVICES, ids=lambda p: p.name)
def test_main_has_one_entry_run_or_build(service: Path) -> None:
    entries = _functions(service / "main.py") & ENTRIES
    assert len(entries) == 1, f"services/{service.name}/main.py has {sorted(entries) or 'neither'} of run, build"


def _registered() -> dict[str, tuple[str, ModuleType]]:
    """Each command of the ``gpucaas`` CLI -> where its function is defined (``module.name``, module)."""
    from gpucaas.cli import app

    owners = {}
    for info in app.registered_commands:
        callback = info.callback
        module = sys.modules[str(getattr(callback, "__module__", ""))]
        owners[str(info.name or getattr(callback, "__name__", ""))] = (
            f"{module.__name__}.{getattr(callback, '__name__', '')}",
            module,
        )
    return owners


def _composed_of(owner: str, module: ModuleType) -> set[str]:
    """The services whose ``cli`` options the ``command`` of ``module`` composes (none for a
    command of other kinds, such as ``version``)."""
    if not owner.endswith(".command"):
        return set()
    return {
        v.__name__.split(".")[1]
        for v in vars(module).values()
        if isinstance(v, ModuleType) and v.__name__.startswith("services.") and v.__name__.endswith(".cli")
    }


@pytest.mark.parametrize("service", SERVICES, ids=lambda p: p.name)
def test_cli_holds_the_command_the_gpucaas_cli_registers(service: Path) -> None:
    owners = dict(_registered().values())
    own = f"services.{service.name}.cli"
    if "command" in _functions(service / "cli.py"):
        assert f"{own}.command" in owners, f"{own}.command is not a command of the gpucaas CLI"
        return
    # a process shared with another service: the command is composed in gpucaas from its cli's options
    composers = [name for name, module in owners.items() if service.name in _composed_of(name, module)]
    assert composers and all(c.startswith("gpucaas.") for c in composers), (
        f"{own} holds no command, and no command of gpucaas composes its options"
    )


def _called(call: ast.Call) -> str:
    """The dotted name one call calls (``logging.basicConfig``, ``root.addHandler``...)."""
    parts, f = [], call.func
    while isinstance(f, ast.Attribute):
        parts.append(f.attr)
        f = f.value
    if isinstance(f, ast.Name):
        parts.append(f.id)
    return ".".join(reversed(parts))


#: what sets logging up (handlers, formats, levels): configure_logging's alone
SETS_UP_LOGGING = ("basicConfig", "dictConfig", "fileConfig", "addHandler", "removeHandler", "setLevel")


def test_logging_is_set_up_by_the_command_alone() -> None:
    offenders = {}
    for path in sorted((ROOT / "services").rglob("*.py")):
        if "generated" in path.parts:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        command = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "command"]
        allowed = {id(c) for n in command for c in ast.walk(n)} if path.name == "cli.py" else set()
        calls = [_called(n) for n in ast.walk(tree) if isinstance(n, ast.Call) and id(n) not in allowed]
        hits = [c for c in calls if c.split(".")[-1] in (*SETS_UP_LOGGING, "configure_logging")]
        if hits:
            offenders[str(path.relative_to(ROOT))] = hits
    assert not offenders, f"logging set up outside a command's configure_logging: {offenders}"
    for name, (owner, module) in _registered().items():
        if owner.startswith("services.") or _composed_of(owner, module):
            function = next(
                n
                for n in ast.parse(inspect.getsource(module)).body
                if isinstance(n, ast.FunctionDef) and n.name == owner.rsplit(".", 1)[1]
            )
            calls = [_called(n) for n in ast.walk(function) if isinstance(n, ast.Call)]
            assert "configure_logging" in calls, f"gpucaas {name} ({owner}) never calls configure_logging"


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
