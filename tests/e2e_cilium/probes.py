"""What the packet tests send and read: busybox ``nc`` from inside a pod (a tenant's container
through ``caasctl exec``, or a pod of the cluster's own through ``kubectl exec``), and Cilium's
own count of the packets its policies dropped."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from typing import Protocol

from core.crds import LABEL_CONTAINER
from devtools.local_cluster.binaries import binary
from devtools.real_node import cilium
from devtools.sandbox import runner
from tests.e2e.conftest import Tenant

PAGE = "served from a gpucaas container"
SERVE = f"mkdir -p /tmp/www && echo '{PAGE}' > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"
#: how long ``nc`` waits for a connection: past it, the packets were dropped
PROBE_SECONDS = 4


class Source(Protocol):
    """Where a probe is sent from: something that runs a shell command in a pod."""

    @property
    def name(self) -> str: ...

    def shell(self, command: str) -> subprocess.CompletedProcess[str]: ...


@dataclass
class Container:
    """A tenant's container, reached as the tenant reaches it (``caasctl exec``)."""

    tenant: Tenant
    cid: str
    ip: str
    node: str

    @property
    def name(self) -> str:
        return self.cid

    def shell(self, command: str) -> subprocess.CompletedProcess[str]:
        return self.tenant.caasctl("exec", self.cid, "--", "sh", "-c", command)


def kubectl_command(sandbox: runner.Sandbox) -> list[str]:
    """The pinned kubectl, as the sandbox's admin."""
    return [binary("kubectl"), "--kubeconfig", str(sandbox.kubeconfig)]


def kubectl(sandbox: runner.Sandbox, *args: str, stdin: str | None = None) -> str:
    out = subprocess.run(
        [*kubectl_command(sandbox), *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return out.stdout


def start_container(sandbox: runner.Sandbox, tenant: Tenant, *command: str, port: bool = False) -> Container:
    """A busybox container of ``tenant``'s, Running (with ``port``: 8080 declared)."""
    args = ["run", "busybox:1.36", "--detach", *(["--port", "8080"] if port else []), "--", *command]
    ran = tenant.caasctl(*args)
    assert ran.returncode == 0, (ran.stdout, ran.stderr)
    cid = ran.stdout.strip()
    tenant.wait(cid, "Running")
    pods = json.loads(kubectl(sandbox, "get", "pods", "-A", "-l", f"{LABEL_CONTAINER}={cid}", "-o", "json"))
    (pod,) = pods["items"]
    return Container(tenant, cid, pod["status"]["podIP"], pod["spec"]["nodeName"])


def get(source: Source, address: str, port: int) -> tuple[int, str]:
    """An HTTP GET from ``source`` with busybox ``nc`` (its ``-w`` bounds the connection: a drop
    reads ``nc: timed out``, a refusal ``Connection refused``): exit code and what it printed."""
    done = source.shell(f"printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w {PROBE_SECONDS} {address} {port}")
    return done.returncode, done.stdout + done.stderr


def answered(out: str, page: str) -> bool:
    """Whether ``out`` is an HTTP 200 carrying ``page``."""
    return out.split("\n", 1)[0].split()[1:2] == ["200"] and page in out


def served(source: Source, address: str, port: int = 8080, page: str = PAGE) -> bool:
    code, out = get(source, address, port)
    return code == 0 and answered(out, page)


def dropped(code: int, out: str) -> bool:
    return code != 0 and "timed out" in out


def assert_dropped(source: Source, address: str, port: int = 8080) -> None:
    code, out = get(source, address, port)
    assert dropped(code, out), f"{address}:{port} from {source.name}: expected a drop, got {code}: {out}"


def policy_drops(sandbox: runner.Sandbox) -> int:
    """Packets Cilium's datapath dropped for policy on every node so far (``cilium-dbg bpf metrics list``)."""
    total = 0
    for node in sandbox.real_nodes.values():
        # it reads the datapath's pinned maps: in the node's mount namespace, where its bpffs is
        holder = node.pid("mount-namespace")
        dbg = node.cluster.bin_dir / cilium.DBG
        out = subprocess.run(
            ["nsenter", f"--mount=/proc/{holder}/ns/mnt", "--", dbg, "bpf", "metrics", "list", "-o", "json"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout
        total += sum(int(row["packets"]) for row in json.loads(out) if row["reason"].startswith("Policy denied"))
    return total
