"""What a container on the real node gets and shows: the kubelet's and runc's doing, observed."""

from __future__ import annotations

from pathlib import Path

from devtools.real_node import big_image
from devtools.real_node.registry import PRIVATE_IMAGE

from .conftest import Node, ctr, make_pod, make_pull_secret, wait_running, wait_terminated, wait_waiting_reason


def test_the_node_registers_itself_with_its_real_versions(real: Node) -> None:
    info = real.core.read_node("real-node").status.node_info
    assert info.kubelet_version.startswith("v1.36.")
    assert info.container_runtime_version.startswith("containerd://2.")


def test_the_log_is_the_containers_output_and_the_exit_code_its_own(real: Node) -> None:
    make_pod(real.core, "exit-three", "busybox:1.36", ["sh", "-c", "echo to stdout; echo to stderr >&2; id -u; exit 3"])
    ended = wait_terminated(real.core, "exit-three")
    assert (ended.exit_code, ended.reason) == (3, "Error")
    log = real.core.read_namespaced_pod_log("exit-three", "default")
    # stdout and stderr are two pipes: each line arrives whole, their order between streams is not kept
    assert sorted(log.splitlines()) == ["1000", "to stderr", "to stdout"]
    # the pod's log folder is the node's own: another kubelet on this machine never sees it
    uid = real.core.read_namespaced_pod("exit-three", "default").metadata.uid
    folder = f"default_exit-three_{uid}"
    assert (real.node.folder / "log" / "pods" / folder / "main" / "0.log").exists()
    assert not Path("/var/log/pods", folder).exists()


def test_memory_past_the_limit_ends_oom_killed(real: Node) -> None:
    make_pod(
        real.core,
        "hog",
        "busybox:1.36",
        ["sh", "-c", "head -c 256m /dev/zero | tail"],
        limits={"memory": "48Mi", "cpu": "250m"},
    )
    ended = wait_terminated(real.core, "hog")
    assert ended.reason == "OOMKilled" and ended.exit_code == 137


def test_limits_are_the_cgroups_and_the_seccomp_profile_is_on(real: Node) -> None:
    make_pod(
        real.core,
        "limits",
        "busybox:1.36",
        [
            "sh",
            "-c",
            "cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/cpu/cpu.cfs_quota_us; "
            "grep -E '^(Seccomp|NoNewPrivs|CapEff):' /proc/self/status",
        ],
        limits={"memory": "64Mi", "cpu": "250m"},
    )
    assert wait_terminated(real.core, "limits").exit_code == 0
    lines = real.core.read_namespaced_pod_log("limits", "default").splitlines()
    assert lines[0] == str(64 * 2**20)
    assert lines[1] == "25000"  # 250m of the default 100 ms period
    status = dict(line.split(":\t") for line in lines[2:])
    assert status == {"Seccomp": "2", "NoNewPrivs": "1", "CapEff": "0000000000000000"}


def test_the_private_image_pulls_only_with_credentials(real: Node) -> None:
    make_pod(real.core, "no-creds", PRIVATE_IMAGE)
    assert wait_waiting_reason(real.core, "no-creds", ("ErrImagePull", "ImagePullBackOff"))
    make_pull_secret(real.core, "pull", real.registries)
    make_pod(real.core, "with-creds", PRIVATE_IMAGE, pull_secret="pull")
    assert wait_terminated(real.core, "with-creds").exit_code == 0
    assert "pulled with credentials" in real.core.read_namespaced_pod_log("with-creds", "default")


def test_an_unknown_image_fails_to_pull(real: Node) -> None:
    make_pod(real.core, "missing", "busybox:0.0-does-not-exist")
    assert wait_waiting_reason(real.core, "missing", ("ErrImagePull", "ImagePullBackOff"))


def test_a_command_that_does_not_exist_is_a_start_error(real: Node) -> None:
    make_pod(real.core, "no-such-command", "busybox:1.36", ["/no/such/binary"])
    ended = wait_terminated(real.core, "no-such-command")
    assert ended.reason == "StartError" and ended.exit_code == 128


def test_containerd_and_the_kubelet_restart_under_a_running_container(real: Node) -> None:
    make_pod(real.core, "long", "busybox:1.36", ["sleep", "600"])
    before = wait_running(real.core, "long").started_at
    pod = real.core.read_namespaced_pod("long", "default")
    container_id = pod.status.container_statuses[0].container_id
    for component in ("containerd", "kubelet"):
        real.node.restart(component)
        after = wait_running(real.core, "long")
        status = real.core.read_namespaced_pod("long", "default").status.container_statuses[0]
        assert (after.started_at, status.container_id, status.restart_count) == (before, container_id, 0), component
    real.core.delete_namespaced_pod("long", "default", grace_period_seconds=0)


def test_an_image_across_the_slow_link_pulls_and_runs(real: Node) -> None:
    # the link's registry side sends at 1 Gbit/s at most, by the kernel's token bucket
    assert "tbf" in real.link.qdisc() and "rate 1Gbit" in real.link.qdisc()
    make_pod(real.core, "far-image", big_image.REFERENCE, annotations={})
    ended = wait_terminated(real.core, "far-image")
    assert ended.exit_code == 0
    line = real.core.read_namespaced_pod_log("far-image", "default").strip()
    # the entry point read its start files (their small copies) and said so
    assert line.startswith(f"{big_image.READY}: read ") and int(line.split()[2]) > 0
    # the pull went to the far registry: containerd holds the image under its public name
    assert big_image.REFERENCE in ctr(real, "images", "ls", "-q")
