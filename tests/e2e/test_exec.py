"""``caasctl exec`` on real nodes: the command runs in the tenant's running container (the
kubelet's and containerd's exec, through kube-apiserver and the API), its output and exit
code come back, a terminal gets its size, and another tenancy learns nothing."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import termios
from collections.abc import Iterator
from typing import Any

import pytest

from devtools.sandbox import runner, tenant_view

from .conftest import CAASCTL, UNTIL_CANCELLED, Tenant, new_tenant

#: its outcome does not depend on the allocation mode: the device-plugin run proves it
pytestmark = pytest.mark.any_allocation


@pytest.fixture(scope="module")
def running(tenant: Tenant) -> Iterator[dict[str, Any]]:
    status, made = tenant.call(
        "POST", "/v1/containers", {"image": "busybox:1.36", "gpus": 1, "command": UNTIL_CANCELLED}
    )
    assert status == 202, made
    yield tenant.wait(made["id"], "Running")
    tenant.call("DELETE", f"/v1/containers/{made['id']}")


@pytest.fixture(scope="module")
def stranger(admin: Tenant) -> Tenant:
    return new_tenant(admin, "realnode-stranger", 1)


def test_exec_prints_the_output_and_exits_with_the_commands_code(tenant: Tenant, running: dict[str, Any]) -> None:
    ran = tenant.caasctl("exec", running["id"], "--", "sh", "-c", "echo $((6*7)); echo to-stderr >&2; exit 5")
    assert (ran.returncode, ran.stdout, ran.stderr) == (5, "42\n", "to-stderr\n")
    assert tenant.caasctl("exec", running["id"], "--", "true").returncode == 0
    script = tenant.caasctl("exec", running["id"], "--", "sh", "-c", "echo one\n\techo two")  # a multi-line script
    assert (script.returncode, script.stdout) == (0, "one\ntwo\n"), script.stderr


def test_exec_sends_the_input_when_asked(tenant: Tenant, running: dict[str, Any]) -> None:
    ran = tenant.caasctl(
        "exec",
        "-i",
        running["id"],
        "--",
        "sh",
        "-c",
        "read line; echo got $line; cat | wc -l",
        stdin="hello\none\ntwo\n",
    )
    assert (ran.returncode, ran.stdout.split()) == (0, ["got", "hello", "2"]), ran.stderr


def test_a_missing_command_is_127_and_says_so(tenant: Tenant, running: dict[str, Any]) -> None:
    ran = tenant.caasctl("exec", running["id"], "--", "no-such-command")
    assert ran.returncode in (126, 127) and "no-such-command" in ran.stderr, (ran.returncode, ran.stderr)


# Kubernetes' exec has no initial terminal size: the first resize reaches the terminal a
# moment after the command started (kubectl's sessions alike). The command waits for each
# size it is told, bounded, then prints it.
SIZES = (
    'wait_size() { i=0; while s=$(stty size 2>/dev/null); [ -z "$s" -o "$s" = "$1" ] && [ $i -lt 600 ]; '
    "do i=$((i+1)); usleep 50000; done; stty size; }; "
    "wait_size '0 0'; tty; read line; wait_size '33 101'; exit 7"
)


def test_exec_with_a_terminal_gets_the_windows_size_and_its_changes(
    sandbox: runner.Sandbox, tenant: Tenant, running: dict[str, Any]
) -> None:
    pid, fd = pty.fork()
    if pid == 0:  # the child: caasctl on a terminal of 33 rows and 101 columns
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 101, 0, 0))
        os.environ.update(
            {"GPUCAAS_CONFIG": str(tenant_view.caasctl_config_path(sandbox)), "GPUCAAS_TOKEN": tenant.token}
        )
        os.execv(str(CAASCTL), [str(CAASCTL), "exec", "-it", running["id"], "--", "sh", "-c", SIZES])
    out = b""

    def read_until(marker: bytes) -> None:
        nonlocal out
        while marker not in out:
            ready, _, _ = select.select([fd], [], [], 120)
            assert ready, out
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child closed the terminal
                chunk = b""
            assert chunk, out
            out += chunk

    read_until(b"/dev/pts/")
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # the window is resized
    os.write(fd, b"\r")
    read_until(b"40 120")
    _, status = os.waitpid(pid, 0)
    text = out.decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 7, text
    assert text.index("33 101") < text.index("/dev/pts/") < text.index("40 120"), text


def test_another_tenancy_gets_what_a_missing_container_gets(
    tenant: Tenant, stranger: Tenant, running: dict[str, Any]
) -> None:
    theirs = stranger.caasctl("exec", running["id"], "--", "true")
    missing = stranger.caasctl("exec", "0" * len(running["id"]), "--", "true")
    assert theirs.returncode == missing.returncode == 1
    assert theirs.stderr.replace(running["id"], "ID") == missing.stderr.replace("0" * len(running["id"]), "ID")
    assert "404" in theirs.stderr and "not found" in theirs.stderr


def test_a_read_token_may_not_exec_and_each_exec_is_in_the_audit_trail(tenant: Tenant, running: dict[str, Any]) -> None:
    status, minted = tenant.call("POST", "/v1/tokens", {"name": "dash", "scope": "read"})
    assert status == 201, minted
    reader = Tenant(tenant.sandbox, minted["token"])
    refused = reader.caasctl("exec", running["id"], "--", "true")
    assert refused.returncode == 1 and "403" in refused.stderr and "'submit'" in refused.stderr, refused.stderr

    status, trail = tenant.call("GET", "/v1/audit?action=container.exec")
    assert status == 200, trail
    execs = [e for e in trail["data"] if e["target"] == running["id"]]
    assert "sh -c 'echo $((6*7)); echo to-stderr >&2; exit 5'" in [e["detail"] for e in execs]
    assert {e["token_name"] for e in execs} and all(e["action"] == "container.exec" for e in execs)


def test_a_container_that_is_not_running_refuses_exec(tenant: Tenant) -> None:
    ran = tenant.caasctl("run", "-d", "busybox:1.36", "--", "true")
    assert ran.returncode == 0, ran.stderr
    cid = ran.stdout.strip()
    tenant.wait(cid, "Succeeded")
    refused = tenant.caasctl("exec", cid, "--", "true")
    assert refused.returncode == 1 and "409" in refused.stderr and "Running" in refused.stderr, refused.stderr
