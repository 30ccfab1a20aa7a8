"""``gpucaas doctor`` on a fake node: all good exits 0; each broken prerequisite
fails its own check, with its fix, and exits non-zero."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from devtools.fake_sysfs import GPU_BDFS, MEMORY_CONTROLLER_BDF, NVSWITCH_BDFS
from gpucaas.cli import app
from gpucaas.doctor.checks import CHECK_IDS
from tests.core_kube.scripted import forbidden, write_kubeconfig
from tests.doctor.conftest import CMDLINE, MODULES, REPO, FakeNode, meminfo


def run_doctor(node: FakeNode, *extra: str) -> tuple[int, dict]:
    result = CliRunner().invoke(app, [*node.cli_args(), "-o", "json", *extra])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, json.loads(result.stdout)


def by_id(report: dict) -> dict[str, dict]:
    return {c["id"]: c for c in report["checks"]}


def failing(report: dict) -> set[str]:
    return {c["id"] for c in report["checks"] if c["status"] == "fail"}


def test_healthy_hgx_node_is_ready(node: FakeNode) -> None:
    code, report = run_doctor(node)
    assert failing(report) == set()
    assert code == 0 and report["ready"] is True
    checks = by_id(report)
    assert list(checks) == list(CHECK_IDS)
    assert checks.pop("kubernetes-api")["status"] == "skip"  # no kubeconfig given, not in a pod
    assert {c["status"] for c in checks.values()} == {"ok"}, checks
    assert "all 8 NVIDIA GPUs bound to vfio-pci" in checks["gpus-vfio"]["summary"]
    assert "all 4 NVSwitches" in checks["nvswitches-vfio"]["summary"]
    assert "512 GiB of hugepages" in checks["hugepages"]["summary"]
    assert "DGX-style layout" in " ".join(checks["iommu-groups"]["details"])
    assert "Fabric Manager (simulator) answering" in checks["fabric-service"]["summary"]


def test_supermicro_shared_fabric_group_is_reported_not_blocking(supermicro_node: FakeNode) -> None:
    code, report = run_doctor(supermicro_node)
    assert code == 0, failing(report)
    groups = by_id(report)["iommu-groups"]
    assert groups["status"] == "ok"
    assert "fabric layout: shared" in groups["summary"]
    assert any("Supermicro-style" in d for d in groups["details"])


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _nic_in_gpu_group(node: FakeNode) -> None:
    """A NIC (mlx5_core) lands in the first GPU's IOMMU group (ACS off behind a switch)."""
    sysfs = node.board.sysfs
    gpu = node.board.gpus[0]
    nic = sysfs / "bus" / "pci" / "devices" / "0000:19:00.0"
    nic.mkdir(parents=True)
    for name, value in (("vendor", "0x15b3"), ("device", "0x1021"), ("class", "0x020000")):
        (nic / name).write_text(value + "\n")
    group = sysfs / "kernel" / "iommu_groups" / str(gpu.iommu_group)
    (nic / "iommu_group").symlink_to(os.path.relpath(group, nic))
    (group / "devices" / "0000:19:00.0").symlink_to(os.path.relpath(nic, group / "devices"))
    driver = sysfs / "bus" / "pci" / "drivers" / "mlx5_core"
    driver.mkdir(parents=True)
    (nic / "driver").symlink_to(os.path.relpath(driver, nic))


def _no_iommu(node: FakeNode) -> None:
    shutil.rmtree(node.board.sysfs / "kernel" / "iommu_groups")


def _stop_fabric_socket(node: FakeNode) -> None:
    node.paths.fabric_socket.unlink()


def _libvirt_dead(node: FakeNode) -> None:
    """libvirtd died: its socket file is left behind, nobody listens."""
    node._listeners[1].close()


def _kubelet_gone(node: FakeNode) -> None:
    node._listeners[0].close()
    (node.paths.device_plugin_dir / "kubelet.sock").unlink()


def _drop_in(node: FakeNode) -> Path:
    return node.etc / "containerd" / "conf.d" / "kata-qemu-nvidia-gpu.toml"


BROKEN: list[tuple[str, Callable[[FakeNode], None], set[str], str]] = [
    ("iommu off in firmware", _no_iommu, {"iommu"}, "intel_iommu=on iommu=pt"),
    (
        "iommu off on cmdline",
        lambda n: _write(n.proc / "cmdline", CMDLINE.replace("intel_iommu=on", "intel_iommu=off")),
        {"iommu"},
        "GRUB_CMDLINE_LINUX",
    ),
    ("gpu on nvidia driver", lambda n: n.board.bind(GPU_BDFS[3], "nvidia"), {"gpus-vfio"}, "vfio-pci.ids=10de:2330"),
    ("gpu unbound", lambda n: n.board.bind(GPU_BDFS[0], None), {"gpus-vfio"}, "driverctl set-override"),
    (
        "nvswitch on host driver",
        lambda n: n.board.bind(NVSWITCH_BDFS[1], "nvidia-nvswitch"),
        {"nvswitches-vfio"},
        "fabric service VM",
    ),
    (
        "memory controller unbound",
        lambda n: n.board.bind(MEMORY_CONTROLLER_BDF, None),
        {"memory-controller-vfio"},
        "11f8:4128",
    ),
    (
        "nvidia module loaded",
        lambda n: _write(n.proc / "modules", MODULES + "nvidia 56717312 0 - Live 0x0\n"),
        {"nvidia-modules"},
        "blacklist nvidia",
    ),
    (
        "nouveau loaded",
        lambda n: _write(n.proc / "modules", MODULES + "nouveau 2998272 0 - Live 0x0\n"),
        {"nvidia-modules"},
        "modprobe -r nouveau",
    ),
    ("nic shares a gpu group", _nic_in_gpu_group, {"iommu-groups"}, "ACS"),
    ("vfio group node missing", lambda n: n.board.remove_vfio_node(GPU_BDFS[5]), {"vfio-device-nodes"}, "udev"),
    (
        "no hugepages",
        lambda n: (
            _write(n.proc / "meminfo", meminfo(0)),
            _write(n.board.sysfs / "kernel" / "mm" / "hugepages" / "hugepages-1048576kB" / "nr_hugepages", "0\n"),
        ),
        {"hugepages"},
        "hugepagesz=1G",
    ),
    (
        "hugetlbfs not mounted",
        lambda n: _write(n.proc / "mounts", "proc /proc proc rw 0 0\n"),
        {"hugepages"},
        "mount -t hugetlbfs",
    ),
    ("no cdi dir", lambda n: n.paths.cdi_dir.rmdir(), {"cdi-dir"}, "mkdir -p"),
    ("kubelet not running", _kubelet_gone, {"kubelet-device-plugins"}, "systemctl restart kubelet"),
    (
        "cri disabled",
        lambda n: _write(
            n.etc / "containerd" / "config.toml",
            'version = 2\ndisabled_plugins = ["cri"]\nimports = ["/etc/containerd/conf.d/*.toml"]\n',
        ),
        {"containerd-cri"},
        "disabled_plugins",
    ),
    (
        "cdi disabled",
        lambda n: _write(_drop_in(n), _drop_in(n).read_text().replace("enable_cdi = true", "enable_cdi = false")),
        {"containerd-cdi"},
        "enable_cdi = true",
    ),
    (
        "cdi dir not read by containerd",
        lambda n: _write(
            _drop_in(n),
            _drop_in(n)
            .read_text()
            .replace('cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]', 'cdi_spec_dirs = ["/etc/cdi"]'),
        ),
        {"containerd-cdi"},
        '"/var/run/cdi" to cdi_spec_dirs',
    ),
    (
        "kata runtime missing",
        lambda n: _drop_in(n).unlink(),
        {"containerd-cdi", "kata-runtime"},
        "deploy/containerd/kata-qemu-nvidia-gpu.toml",
    ),
    (
        "containerd config broken",
        lambda n: _write(n.etc / "containerd" / "config.toml", "version = 2\n[plugins\n"),
        {"containerd-cri", "containerd-cdi", "kata-runtime"},
        "TOML",
    ),
    ("libvirt not listening", _libvirt_dead, {"libvirt"}, "libvirtd"),
    ("fabric service down", _stop_fabric_socket, {"fabric-service"}, "fabric DaemonSet"),
    (
        "service vm crashed",
        lambda n: n.vm_state.update(state="crashed", restarts=4),
        {"fabric-service"},
        "virsh console",
    ),
    ("fabric manager down", lambda n: n.fabric.stop(), {"fabric-service"}, "logs ds/gpucaas-fabric"),
]


@pytest.mark.parametrize(("breaks", "expected", "hint"), [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN])
def test_each_broken_prerequisite_fails_its_check(
    node: FakeNode, breaks: Callable[[FakeNode], None], expected: set[str], hint: str
) -> None:
    breaks(node)
    code, report = run_doctor(node)
    assert failing(report) == expected
    assert code == 1 and report["ready"] is False
    hints = " ".join(by_id(report)[i]["hint"] or "" for i in expected)
    assert hint in hints


WARNINGS: list[tuple[str, Callable[[FakeNode], None], str, str]] = [
    ("no iommu=pt", lambda n: _write(n.proc / "cmdline", CMDLINE.replace(" iommu=pt", "")), "iommu", "iommu=pt"),
    ("gpu nvlink failed", lambda n: n.fabric.inject_gpu_nvlink_failure(3), "fabric-service", "caasctl gpus"),
    (
        "too few hugepages",
        lambda n: (
            _write(n.proc / "meminfo", meminfo(8)),
            _write(n.board.sysfs / "kernel" / "mm" / "hugepages" / "hugepages-1048576kB" / "nr_hugepages", "8\n"),
        ),
        "hugepages",
        "hugepages=<N>",
    ),
    (
        "privileged pods get host devices",
        lambda n: _write(
            _drop_in(n),
            _drop_in(n)
            .read_text()
            .replace("privileged_without_host_devices = true", "privileged_without_host_devices = false"),
        ),
        "kata-runtime",
        "privileged_without_host_devices = true",
    ),
]


@pytest.mark.parametrize(("degrade", "check_id", "hint"), [w[1:] for w in WARNINGS], ids=[w[0] for w in WARNINGS])
def test_degraded_prerequisites_warn_without_blocking(
    node: FakeNode, degrade: Callable[[FakeNode], None], check_id: str, hint: str
) -> None:
    degrade(node)
    code, report = run_doctor(node)
    check = by_id(report)[check_id]
    assert check["status"] == "warn"
    assert hint in check["hint"]
    assert failing(report) == set()
    assert code == 0


def test_containerd_2_drop_in_is_understood(node: FakeNode) -> None:
    _write(node.etc / "containerd" / "config.toml", 'version = 3\nimports = ["/etc/containerd/conf.d/*.toml"]\n')
    shutil.copy(REPO / "deploy" / "containerd" / "kata-qemu-nvidia-gpu.v3.toml", _drop_in(node))
    code, report = run_doctor(node)
    checks = by_id(report)
    assert [checks[i]["status"] for i in ("containerd-cri", "containerd-cdi", "kata-runtime")] == ["ok"] * 3
    assert code == 0


def test_table_output_names_the_fix(node: FakeNode) -> None:
    node.board.bind(GPU_BDFS[2], "nvidia")
    result = CliRunner().invoke(app, [*node.cli_args(), "--verbose"])
    assert result.exit_code == 1
    assert "FAIL" in result.stdout and "fix:" in result.stdout
    assert "0000:3a:00.0 (nvidia)" in result.stdout
    assert "1 check(s) block GPU containers on this node: gpus-vfio" in result.stdout


def test_only_selected_checks_run(node: FakeNode) -> None:
    node.fabric.stop()
    code, report = run_doctor(node, "--check", "gpus-vfio", "--check", "hugepages")
    assert [c["id"] for c in report["checks"]] == ["gpus-vfio", "hugepages"]
    assert code == 0  # the broken fabric was not asked about


def test_unknown_check_is_a_usage_error(node: FakeNode) -> None:
    result = CliRunner().invoke(app, [*node.cli_args(), "--check", "gpu-drivers"])
    assert result.exit_code == 2
    assert "unknown check" in result.output and "gpus-vfio" in result.output


def test_wrong_roots_fail_clearly(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(
        app,
        [
            "doctor",
            "--sysfs-root",
            str(empty),
            "--dev-root",
            str(empty),
            "--proc-root",
            str(empty),
            "--etc-root",
            str(empty),
            "--cdi-dir",
            str(empty / "cdi"),
            "--kubelet-dir",
            str(empty),
            "--libvirt-socket",
            str(empty / "l.sock"),
            "--fabric-socket",
            str(empty / "f.sock"),
            "-o",
            "json",
        ],
    )
    assert result.exit_code == 1
    checks = by_id(json.loads(result.stdout))
    assert "--sysfs-root" in checks["gpus-vfio"]["summary"]
    assert "--proc-root" in checks["nvidia-modules"]["summary"]
    assert checks["fabric-service"]["status"] == "skip"


def test_kubernetes_api_check_reaches_the_cluster(node: FakeNode, kubeconfig: Path) -> None:
    code, report = run_doctor(node, "--kubeconfig", str(kubeconfig), "--check", "kubernetes-api")
    check = by_id(report)["kubernetes-api"]
    assert code == 0 and check["status"] == "ok", check
    assert "GPULeases can be listed" in check["summary"]


def test_kubernetes_api_check_tells_forbidden_from_unreachable(node: FakeNode, tmp_path: Path, scripted) -> None:
    user = "system:serviceaccount:gpucaas-system:gpucaas-device-plugin"
    srv = scripted([(403, forbidden(user, "list", "gpuleases", "gpucaas.dev"))])
    code, report = run_doctor(
        node, "--kubeconfig", str(write_kubeconfig(tmp_path / "kc", srv.url)), "--check", "kubernetes-api"
    )
    check = by_id(report)["kubernetes-api"]
    assert code == 1 and check["status"] == "fail"
    assert check["summary"] == f"forbidden: {user} cannot list gpuleases.gpucaas.dev"
    assert "ClusterRole" in check["hint"]

    code, report = run_doctor(
        node,
        "--kubeconfig",
        str(write_kubeconfig(tmp_path / "dead", "http://127.0.0.1:9")),
        "--check",
        "kubernetes-api",
    )
    check = by_id(report)["kubernetes-api"]
    assert code == 1 and check["summary"].startswith("Kubernetes unreachable at http://127.0.0.1:9")
