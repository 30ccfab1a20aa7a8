"""A running sandbox (the whole control plane + two real nodes, each with a fake HGX H100 board:
the pinned kubelet, containerd and runc run the containers) for end-to-end tests.

The tests talk to it as tenants and an admin would: HTTPS to the API, and, to check
the outcome, the Kubernetes API, the nodes' fabric sockets, CDI specs and kubelet state.

The suite runs in either allocation mode: ``GPUCAAS_E2E_ALLOCATION=device-plugin`` (the
default) or ``dra`` (``make test`` runs it in both); and on the product either as the platform
team installs it, ``GPUCAAS_E2E_INSTALL=helm`` (the default: the chart, its image pushed to the
sandbox's registry, the chart's production security contexts), or as processes on this machine,
``processes``. The helpers below read what the node
handed the container the way that mode's kubelet records it: the device plugin's Allocate
answer and the PodResources API, or the DRA manager's prepared claims.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from core.cdi import spec_filename
from core.crds import GPULEASE_PLURAL, GROUP, VERSION
from core.fabric_client import FabricClient
from core.kube import new_api_client
from core.lease_store import lease_name
from devtools.sandbox import chart_install, host_database, kubelet_records, runner, tenant_view
from devtools.waiting import wait_for
from services.device_plugin.podresources import (
    PodResourcesReader,
    PodResourcesUnavailable,
)
from services.dra_driver.slices import gpus_of_devices, offered_devices
from tests.fixtures.sandbox import package_sandbox

ALLOCATION_ENV = "GPUCAAS_E2E_ALLOCATION"
SCOPE_ENV = "GPUCAAS_E2E_SCOPE"
INSTALL_ENV = "GPUCAAS_E2E_INSTALL"
INSTALLS = ("helm", "processes")
CAASCTL = Path(sys.executable).with_name("caasctl")
#: how long a container may take to reach a state (image pulls and starts on a busy 2-CPU machine)
TIMEOUT = 240.0
#: a command that runs until the container is cancelled and then ends at once: the shell traps
#: SIGTERM (a plain ``sleep`` as PID 1 ignores it, and its pod would hold its GPUs through the
#: 30 s grace period until the kubelet's SIGKILL)
UNTIL_CANCELLED = ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]
ALLOCATION_MODES = ("device-plugin", "dra")


def allocation_mode() -> str:
    """The allocation mode the end-to-end sandbox runs in (``$GPUCAAS_E2E_ALLOCATION``)."""
    mode = os.environ.get(ALLOCATION_ENV, "") or "device-plugin"
    if mode not in ALLOCATION_MODES:
        raise pytest.UsageError(f"{ALLOCATION_ENV}={mode!r}: use one of {', '.join(ALLOCATION_MODES)}")
    return mode


def install_mode() -> str:
    """How the end-to-end sandbox runs the product (``$GPUCAAS_E2E_INSTALL``): ``helm`` (the
    default, as ``make sandbox`` runs it) or ``processes``."""
    mode = os.environ.get(INSTALL_ENV, "") or "helm"
    if mode not in INSTALLS:
        raise pytest.UsageError(f"{INSTALL_ENV}={mode!r}: use one of {', '.join(INSTALLS)}")
    return mode


def node_service(name: str) -> str:
    """The mode's name of a node daemon: the device plugin's place is the DRA driver's in dra mode."""
    return "dra-driver" if name == "device-plugin" and allocation_mode() == "dra" else name


def allocation_scope_only() -> bool:
    """``GPUCAAS_E2E_SCOPE=allocation`` (``make test-e2e-dra``): only the tests whose outcome
    depends on the allocation mode run; those marked ``any_allocation`` are left to the
    device-plugin run, which runs every test."""
    scope = os.environ.get(SCOPE_ENV, "") or "all"
    if scope not in ("all", "allocation"):
        raise pytest.UsageError(f"{SCOPE_ENV}={scope!r}: use all or allocation")
    return scope == "allocation"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In the allocation scope, the ``any_allocation`` tests are deselected. The chart-RBAC
    audit checks read what every other end-to-end test did: run them last among the
    end-to-end tests (right after the last of them, not at the end of the whole session,
    where the package's sandbox would already be gone and a fresh one started)."""
    if allocation_scope_only():
        left = [i for i in items if i.get_closest_marker("any_allocation") is not None]
        if left:
            config.hook.pytest_deselected(items=left)
            items[:] = [i for i in items if i not in left]
    last = [i for i in items if i.module is not None and i.module.__name__.endswith("test_rbac_of_the_chart")]
    if not last:
        return
    rest = [i for i in items if i not in last]
    e2e = [n for n, i in enumerate(rest) if i.module is not None and i.module.__name__.startswith("tests.e2e.")]
    at = (e2e[-1] + 1) if e2e else len(rest)
    items[:] = rest[:at] + last + rest[at:]


class Caller:
    """One bearer token's view of the API."""

    def __init__(self, sandbox: runner.Sandbox, token: str) -> None:
        self.sandbox = sandbox
        self.token = token
        self.ctx = ssl.create_default_context(cafile=str(sandbox.tls.ca_cert))

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.sandbox.api_url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30, context=self.ctx) as resp:
                raw = resp.read()
                return resp.status, (
                    json.loads(raw) if raw and resp.headers.get_content_type() == "application/json" else raw.decode()
                )
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                return exc.code, json.loads(raw)
            except ValueError:
                return exc.code, raw.decode()


class Tenant(Caller):
    """A token's view of the API, with the installed caasctl beside it (configured by the
    caasctl.yaml the sandbox writes, the token this one's)."""

    def caasctl(
        self, *args: str, timeout: float = TIMEOUT, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "GPUCAAS_CONFIG": str(tenant_view.caasctl_config_path(self.sandbox)),
            "GPUCAAS_TOKEN": self.token,
            "COLUMNS": "200",
        }
        return subprocess.run(
            [str(CAASCTL), *args], env=env, capture_output=True, text=True, timeout=timeout, check=False, input=stdin
        )

    def wait(self, cid: str, *statuses: str) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            status, body = self.call("GET", f"/v1/containers/{cid}")
            assert status == 200, body
            return body if body["status"] in statuses else None

        return wait_for(reached, TIMEOUT, interval=0.3, what=f"container {cid} in {statuses}")


CPU_HOG_ENV = "GPUCAAS_E2E_CPU_HOG"


@pytest.fixture(scope="package", autouse=True)
def cpu_hog() -> Iterator[int]:
    """With ``GPUCAAS_E2E_CPU_HOG=N`` (``make test-contention``), ``stress-ng --cpu N`` runs
    beside the whole end-to-end package (autouse: the tests that start their own
    sandbox too), started before the package's sandbox and stopped after it:
    the control plane must not stall or give up under CPU contention.
    Yields the number of hog workers (0: none)."""
    workers = int(os.environ.get(CPU_HOG_ENV, "0") or 0)
    if workers <= 0:
        yield 0
        return
    if shutil.which("stress-ng") is None:
        pytest.fail(
            f"{CPU_HOG_ENV}={workers} asks for a CPU hog, but stress-ng is not installed (make system-deps installs it)"
        )
    hog = subprocess.Popen(
        ["stress-ng", "--cpu", str(workers), "--quiet"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield workers
    finally:
        os.killpg(hog.pid, 15)  # stress-ng's workers are its children, in its session
        hog.wait(timeout=30)


@pytest.fixture(scope="package")
def sandbox(request: pytest.FixtureRequest, cpu_hog: int) -> Iterator[runner.Sandbox]:
    with package_sandbox(request, "gpucaas-e2e-", allocation_mode=allocation_mode(), install=install_mode()) as sb:
        yield sb


@pytest.fixture(scope="package")
def admin(sandbox: runner.Sandbox) -> Tenant:
    return Tenant(sandbox, sandbox.admin_token)


@pytest.fixture(scope="package")
def k8s(sandbox: runner.Sandbox) -> Iterator[client.ApiClient]:
    api = new_api_client(sandbox.kubeconfig)
    yield api
    api.close()


def new_tenant(admin: Caller, name: str, gpu_quota: int = 16) -> Tenant:
    """A tenancy (made once per sandbox) and a fresh admin-scope token of it."""
    status, body = admin.call("POST", "/v1/admin/tenancies", {"name": name, "gpu_quota": gpu_quota})
    assert status in (201, 409), body
    status, body = admin.call("POST", f"/v1/admin/tenancies/{name}/tokens", {})
    assert status == 201, body
    return Tenant(admin.sandbox, body["token"])


@pytest.fixture(scope="package")
def tenant_factory(admin: Tenant) -> Callable[[str], Tenant]:
    return lambda name: new_tenant(admin, name)


@pytest.fixture(scope="package")
def tenant(admin: Tenant) -> Tenant:
    """The tenancy ``realnode`` (16 GPUs), shared by the tests of what runs in a container."""
    return new_tenant(admin, "realnode", 16)


def container_status(caller: Caller, cid: str) -> dict[str, Any]:
    status, body = caller.call("GET", f"/v1/containers/{cid}")
    assert status == 200, body
    return body


def wait_status(caller: Caller, cid: str, *wanted: str, timeout: float = 120.0) -> dict[str, Any]:
    return wait_for(
        lambda: (c := container_status(caller, cid))["status"] in wanted and c,
        timeout,
        what=f"container {cid} in {wanted}",
    )


def activations(sandbox: runner.Sandbox) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for node in sandbox.nodes:
        with FabricClient(node.fabric_socket, timeout=10) as fc:
            out[node.name] = fc.activations()
    return out


def leases(k8s: client.ApiClient) -> list[dict[str, Any]]:
    return client.CustomObjectsApi(k8s).list_cluster_custom_object(GROUP, VERSION, GPULEASE_PLURAL)["items"]


def allocated_devices(sandbox: runner.Sandbox, namespace: str, pod: str) -> list[str]:
    """The GPUs (PCI addresses) the pod holds, as the node's kubelet knows them.

    device-plugin: from the kubelet's v1 PodResources API (its device manager's record of the
    Allocate answers). dra: from the CDI ids of the claims the kubelet's DRA manager prepared
    for the pod.
    """
    if allocation_mode() == "dra":
        got = handed_over(sandbox, namespace, pod)
        return got[1]["devices"] if got else []
    for node in sandbox.nodes:
        reader = PodResourcesReader(node.kubelet.pod_resources_socket)
        try:
            held = reader.list("nvidia.com/gpu")
        except PodResourcesUnavailable:  # the kubelet restarting
            continue
        finally:
            reader.close()
        for c in held:
            if (c.namespace, c.pod) == (namespace, pod):
                return sorted(c.device_ids)
    return []


def pod_uid(sandbox: runner.Sandbox, namespace: str, pod: str) -> str | None:
    """The pod's UID (the kubelet's checkpoints know pods by UID), or None when it is gone."""
    with new_api_client(sandbox.kubeconfig) as api:
        try:
            return client.CoreV1Api(api).read_namespaced_pod(pod, namespace).metadata.uid
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise


def handed_over(sandbox: runner.Sandbox, namespace: str, pod: str) -> tuple[str, dict[str, Any]] | None:
    """(node, record) of what the node handed the kubelet for the pod: ``devices`` (PCI
    addresses), ``cdi`` (CDI device names) and ``holder`` (the fabric service's holder of the
    partition), read from the node's kubelet checkpoints (:mod:`devtools.sandbox.kubelet_records`)."""
    uid = pod_uid(sandbox, namespace, pod)
    if uid is None:
        return None
    got = kubelet_records.handed_over(
        {n.name: n.kubelet.root for n in sandbox.nodes}, uid, dra=allocation_mode() == "dra"
    )
    if got is None:
        return None
    return got.node, {"devices": got.devices, "cdi": got.cdi, "holder": got.holder}


def holder_of(sandbox: runner.Sandbox, namespace: str, pod: str) -> str:
    """The fabric service's holder of the pod's partition (the node must have handed it over)."""
    got = handed_over(sandbox, namespace, pod)
    assert got is not None, f"nothing handed over for {namespace}/{pod}"
    return got[1]["holder"]


def pci_of(sandbox: runner.Sandbox, node: str) -> dict[int, str]:
    """physical GPU id -> PCI address on ``node``, from its fabric service."""
    path = next(n.fabric_socket for n in sandbox.nodes if n.name == node)
    with FabricClient(path, timeout=5) as fc:
        return {int(g["physical_id"]): g["pci_bus_id"] for g in fc.topology()["gpus"]}


def cdi_device_nodes(sandbox: runner.Sandbox, node_name: str) -> dict[str, list[str]]:
    """CDI name -> the device nodes the node's CDI spec (written by the device plugin) gives it."""
    node = next(n for n in sandbox.nodes if n.name == node_name)
    spec = json.loads((node.cdi_dir / spec_filename("nvidia.com/gpu")).read_text())
    return {
        f"{spec['kind']}={d['name']}": [n["path"] for n in d["containerEdits"]["deviceNodes"]] for d in spec["devices"]
    }


def lease_of(k8s: client.ApiClient, node: str, pci_address: str) -> dict[str, Any]:
    return client.CustomObjectsApi(k8s).get_cluster_custom_object(
        GROUP, VERSION, GPULEASE_PLURAL, lease_name(node, pci_address)
    )


def settled(sandbox: runner.Sandbox, k8s: client.ApiClient) -> bool:
    """Nothing held: no active activation on any node, every lease Free, and every node offers
    all of its GPUs again: 8 allocatable ``nvidia.com/gpu`` for the kubelet (device-plugin), or
    all 15 partitions of the board in the node's ResourceSlice, none tainted (dra)."""
    acts = activations(sandbox)
    nodes = client.CoreV1Api(k8s).list_node(label_selector="gpucaas.dev/gpu-node=true").items
    if not (
        all(not a for a in acts.values()) and all((lz.get("status") or {}).get("state") == "Free" for lz in leases(k8s))
    ):
        return False
    if allocation_mode() == "dra":
        return all(offered_gpus(k8s, n.metadata.name) == ALL_GPUS for n in nodes)
    return all((n.status.allocatable or {}).get("nvidia.com/gpu") == "8" for n in nodes)


#: A board's GPUs by physical id.
ALL_GPUS = frozenset(range(1, 9))


def offered_gpus(k8s: client.ApiClient, node: str) -> frozenset[int]:
    """The GPUs the node's DRA driver offers now: those of its ResourceSlices' devices without
    a taint that blocks allocation (the driver taints a GPU while it may not be handed out; the
    devices themselves always stay)."""
    slices = client.CustomObjectsApi(k8s).list_cluster_custom_object(
        "resource.k8s.io", "v1", "resourceslices", field_selector=f"spec.nodeName={node}"
    )["items"]
    return gpus_of_devices(offered_devices(slices))


def sandbox_dir(sandbox: runner.Sandbox) -> Path:
    return sandbox.state_dir


def crash_node_daemon(sandbox: runner.Sandbox, service: str, node: str) -> None:
    """SIGKILL of ``node``'s ``service`` (``device-plugin``, the DRA driver in dra mode, or
    ``fabric``): a crash, then the daemon started again. As processes, the sandbox's supervisor
    starts it; as the chart's DaemonSet pod, the kubelet restarts its container in place, and
    this returns once the pod is Ready again with one restart more."""
    name = node_service(service)
    if sandbox.release is None:
        sandbox.supervisor.restart(f"{name}-{node}")
        return
    core = client.CoreV1Api(new_api_client(sandbox.kubeconfig))
    try:

        def pod() -> Any:
            (found,) = core.list_namespaced_pod(
                chart_install.NAMESPACE,
                label_selector=f"app.kubernetes.io/component={name}",
                field_selector=f"spec.nodeName={node}",
            ).items
            return found

        running = pod()
        before = running.status.container_statuses[0].restart_count
        # the pod's own process: its cgroup names the pod's UID (another sandbox beside this one
        # has nodes, and daemons, of the same names)
        uid = running.metadata.uid
        (pid,) = [p for p in daemon_processes(name) if uid in _cgroup(p) or uid.replace("-", "_") in _cgroup(p)]
        os.kill(pid, signal.SIGKILL)

        def restarted() -> bool:
            (status,) = pod().status.container_statuses
            return bool(status.restart_count > before and status.ready)

        wait_for(restarted, TIMEOUT, interval=0.5, what=f"{name} on {node} restarted by its kubelet and Ready")
    finally:
        core.api_client.close()


def daemon_processes(name: str) -> list[int]:
    """The pids of this machine's ``gpucaas <name>`` processes (the chart's node daemons' containers)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        # the image's entry point is a Python script: its interpreter comes first
        if any(a.endswith(b"/gpucaas") and b == name.encode() for a, b in zip(argv, argv[1:], strict=False)):
            found.append(int(proc.name))
    return found


def _cgroup(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return ""


def receiver_host(sandbox: runner.Sandbox) -> str:
    """Where a tenant's webhook receiver on this machine listens for the API to reach it:
    loopback for the API as a process here; for the chart's API pod, the address every pod of
    the sandbox reaches this machine at (the sandbox's values allow it, ``webhook_allow_networks``)."""
    if sandbox.release is None:
        return "127.0.0.1"
    assert sandbox.service_range is not None
    return sandbox.service_range.host_address


def database_contents(sandbox: runner.Sandbox) -> dict[str, bytes]:
    """What the API's database holds, as someone with a copy of it reads it: the SQLite file
    and its WAL (the API as a process here), or a ``pg_dump`` of the sandbox's PostgreSQL
    database (the chart's API)."""
    if sandbox.release is None:
        return {str(p): p.read_bytes() for p in sandbox.state_dir.glob("gpucaas.db*")}
    return {host_database.name_for(sandbox.state_dir): host_database.dump(sandbox.state_dir)}
