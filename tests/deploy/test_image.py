"""The product's image (deploy/image/, docs/image.md): what it runs, as whom, and what it holds.

The work tree's image comes from ``deploy/image/build.sh`` once for the module: `make test`'s
image stage has built a clean commit's, and otherwise the product layer is built on the cached
base. Its layers are unpacked into a folder, and the image's entry point runs from there on a
read-only root as uid 65532, with the image's environment and nothing of this machine's.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import NoReturn

import pytest

from devtools.image import BUILD_SCRIPT, BuiltImage, build

REPO = BUILD_SCRIPT.parents[2]
VENV = "/opt/gpucaas"
SITE = f"{VENV}/lib/python3.11/site-packages"
PRODUCT = {"gpucaas", "core", "services", "vm_images"}


def _cannot_build(why: str) -> NoReturn:
    """A skip on a developer's machine without the tools; in CI (``CI`` set) a failure, since
    `make test` installs them."""
    if os.environ.get("CI"):
        pytest.fail(f"{why} (CI is set: `make test`'s image stage installs what the build needs)", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="module")
def image() -> BuiltImage:
    if os.geteuid() != 0:
        _cannot_build("building and unpacking the image needs root (mmdebstrap, chroot)")
    missing = [tool for tool in ("mmdebstrap", "umoci") if shutil.which(tool) is None]
    if missing:
        _cannot_build(f"{', '.join(missing)} missing: `make image` installs them")
    return build()


@pytest.fixture(scope="module")
def rootfs(image: BuiltImage, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rootfs")
    for layer in image.layers():
        subprocess.run(["tar", "-C", str(root), "--numeric-owner", "-xzf", str(layer)], check=True)
    return root


def run_in(image: BuiltImage, root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``argv`` in the image's root filesystem mounted read-only (a mount namespace of its own),
    as the image's user, with the image's environment only."""
    config = image.config()["config"]
    mount_ro = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec chroot --userspec="$1" "$0" "${@:2}"'
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "bash", "-c", mount_ro, str(root), config["User"]]
        + ["/usr/bin/env", "-i", *config["Env"], *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_entry_point_runs_as_uid_65532_on_a_read_only_root(image: BuiltImage, rootfs: Path) -> None:
    config = image.config()["config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == [f"{VENV}/bin/gpucaas"]
    help_ = run_in(image, rootfs, *config["Entrypoint"], "--help")
    assert help_.returncode == 0, help_.stderr
    for command in ("api", "controller", "device-plugin", "dra-driver", "fabric", "scheduler-extender"):
        assert re.search(rf"^\W+{command}\b", help_.stdout, re.M), (command, help_.stdout)
    assert "sandbox" not in help_.stdout
    # the uid is a known user (libraries that look up the home directory find one)
    whoami = run_in(image, rootfs, "/usr/bin/id", "-un")
    assert whoami.stdout.strip() == "nonroot", whoami.stderr


def test_the_tag_and_the_times_come_from_the_commit(image: BuiltImage) -> None:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True).stdout

    dirty = "-dirty" if git("status", "--porcelain").strip() else ""
    assert image.tag == git("rev-parse", "--short=12", "HEAD").strip() + dirty
    config = image.config()
    assert config["config"]["Labels"]["org.opencontainers.image.revision"] == git("rev-parse", "HEAD").strip()
    committed = datetime.fromtimestamp(int(git("log", "-1", "--format=%ct")), UTC)
    assert config["created"] == committed.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_the_grpc_stubs_are_generated_in_the_image(image: BuiltImage, rootfs: Path) -> None:
    for stubs in ("services/device_plugin/api/generated", "services/dra_driver/api/generated"):
        assert (rootfs / SITE.lstrip("/") / stubs / "_stamp.txt").is_file(), stubs
    # current for the image's protobuf and grpcio-tools, so nothing is generated at run time
    # (the root is read-only): every stub module imports through the services' own names
    probe = (
        "from services.device_plugin import api as dp\n"
        "from services.dra_driver import api as dra\n"
        "from services.device_plugin.api.build import STUBS as a\n"
        "from services.dra_driver.api.build import STUBS as b\n"
        "assert a.is_current() and b.is_current()\n"
        "for m in (dp.dp_grpc, dp.pr_grpc, dra.dra_grpc, dra.reg_grpc, dra.health_grpc): print(m.__name__)\n"
    )
    result = run_in(image, rootfs, f"{VENV}/bin/python", "-c", probe)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.split()) == 5


def test_the_image_holds_the_product_and_its_runtime_dependencies_only(image: BuiltImage, rootfs: Path) -> None:
    site = rootfs / SITE.lstrip("/")
    # the wheel's packages, and no development tree (tests, devtools, benchmarks)
    packages = {p.name for p in site.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert PRODUCT <= packages
    assert not packages & {"tests", "devtools", "benchmarks"}, packages
    assert not (site / "vm_images" / "test_image").exists()
    # the distributions installed are the lock's (no dev extras, no pip) and the product's
    lock = (REPO / "deploy" / "image" / "requirements.lock").read_text()
    locked = {_normal(line.split("==")[0]) for line in lock.splitlines() if line and not line.startswith("#")}
    installed = {_normal(p.name.split("-")[0]) for p in site.glob("*.dist-info")}
    assert installed == (locked - {"pip"}) | {"gpucaas"}
    assert not list((rootfs / VENV.lstrip("/") / "bin").glob("pip*"))
    # libvirt's client library comes from Debian, for the fabric service
    libvirt = run_in(image, rootfs, f"{VENV}/bin/python", "-c", "import libvirt; print(libvirt.getVersion())")
    assert libvirt.returncode == 0 and int(libvirt.stdout) >= 9_000_000, libvirt.stderr


def test_a_second_build_of_the_tree_gives_the_same_digest(image: BuiltImage) -> None:
    again = build(env={"GPUCAAS_IMAGE_REBUILD": "1"})
    assert (again.tag, again.digest) == (image.tag, image.digest)


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()
