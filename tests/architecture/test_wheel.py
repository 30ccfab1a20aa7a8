"""The wheel holds the product only, and its ``gpucaas`` works without the development tree.

The product is ``gpucaas`` (the programs), ``core``, ``services`` and ``vm_images`` (less
``vm_images.test_image``, the fabric tests' QEMU image);
``devtools`` (the sandbox, the local cluster, real nodes, fakes), ``benchmarks`` and
``tests`` stay in the source checkout, whose venv reaches them through a ``.pth`` file
(Makefile). The wheel is built by pip from a copy of the tree (an in-tree ``build/`` may hold
files of an earlier build, which setuptools would put in the wheel), offline, in about 2 s.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = {"gpucaas", "core", "services", "vm_images"}
DEVELOPMENT = {"devtools", "benchmarks", "tests"}
#: what never goes into a build: venvs, build output, caches, git, the sandbox's state
NOT_COPIED = shutil.ignore_patterns(
    ".venv*", "build", "dist", "*.egg-info", ".git", "__pycache__", ".*_cache", ".sandbox", ".hypothesis", "site"
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("wheel")
    source = base / "source"
    shutil.copytree(ROOT, source, ignore=NOT_COPIED)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
        + ["-w", str(base / "out"), str(source)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (built,) = (base / "out").glob("gpucaas-*.whl")
    return built


def test_the_wheel_holds_the_product_only(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top == PRODUCT, f"the wheel's top-level packages: {sorted(top)}"
    assert not top & DEVELOPMENT
    # the QEMU image the fabric tests boot is a test fixture, not the product
    assert not [n for n in names if n.startswith("vm_images/test_image/")]
    # the files the product reads beside its modules
    assert any(n.startswith("core/crds/") and n.endswith(".yaml") for n in names)
    assert any(n.startswith("services/device_plugin/api/protos/") and n.endswith(".proto") for n in names)
    assert "services/api/console/static/index.html" in names
    assert any(n.startswith("services/api/migrations/versions/") for n in names)


def test_the_wheels_gpucaas_has_every_service_and_no_sandbox(wheel: Path, tmp_path: Path) -> None:
    """The unpacked wheel before this venv's packages, without its .pth files (``-S``): neither
    the editable install nor the source tree is on the path, as on a machine the wheel went to."""
    unpacked = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(unpacked)
    probe = (
        "import importlib.util, json, typer.main\n"
        "from gpucaas.cli import app\n"
        "import gpucaas\n"
        "print(json.dumps({'file': gpucaas.__file__, 'devtools': importlib.util.find_spec('devtools') is not None,"
        " 'commands': sorted(typer.main.get_command(app).commands)}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(unpacked), sysconfig.get_paths()["purelib"]])
    result = subprocess.run(
        [sys.executable, "-S", "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["file"].startswith(str(unpacked)) and not seen["devtools"], seen
    assert "sandbox" not in seen["commands"]
    assert {"api", "controller", "device-plugin", "doctor", "dra-driver", "fabric", "scheduler-extender"} <= set(
        seen["commands"]
    )


def test_the_source_checkouts_gpucaas_has_the_sandbox() -> None:
    import typer.main

    from gpucaas.cli import app

    assert "sandbox" in typer.main.get_command(app).commands  # type: ignore[attr-defined]
