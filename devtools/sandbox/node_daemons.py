"""The gpucaas daemons of one sandbox node, as its DaemonSets would run them: the fabric
service (Fabric Manager simulator on the fake board, the service VM on libvirt's test driver),
then the device plugin, or in the ``dra`` mode the DRA driver, each with the GPU-lease agent
beside it. Each is ready when the node's kubelet shows what it registered.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devtools.ports import free_port
from devtools.processes import unix_socket_ready
from devtools.sandbox.cluster import node_bound_identity
from devtools.sandbox.nodes import NodePaths
from devtools.sandbox.services import start_service

if TYPE_CHECKING:
    from devtools.sandbox.runner import Plan, Sandbox


def start_node_daemons(sandbox: Sandbox, plan: Plan, node: NodePaths) -> None:
    """The fabric service, then the device plugin or the DRA driver, of ``node``."""
    say, sup, name = plan.say, sandbox.supervisor, node.name
    fabric_kc = sandbox.kubeconfig_of("fabric")
    say(f"[{name}] starting the fabric service (Fabric Manager simulator, service VM on libvirt test:///)")
    start_service(
        sup,
        f"fabric-{name}",
        ["fabric"],
        env={**node_env(node, fabric_kc), **fabric_env(node, fabric_kc)},
        ready=unix_socket_ready(node.fabric_socket),
    )
    if plan.allocation_mode == "dra":
        say(
            f"[{name}] starting the DRA driver (ResourceSlices, NodePrepareResources, binding conditions; "
            "the GPU-lease agent beside it)"
        )
        # its token bound to its node, as a DaemonSet pod's
        driver_kc = node_bound_identity(sandbox.state_dir, sandbox.kubeconfig, sandbox.identities, "dra-driver", name)
        start_service(
            sup,
            f"dra-driver-{name}",
            ["dra-driver"],
            env={
                **node_env(node, driver_kc),
                **dra_driver_env(node, driver_kc),
                **device_plugin_env(sandbox.state_dir),
            },  # leases and firmware check as beside the plugin
            ready=published_slices(sandbox.kubeconfig, name),
        )
        return
    say(f"[{name}] starting the device plugin (with the GPU-lease agent beside it)")
    start_service(
        sup,
        f"device-plugin-{name}",
        [
            "device-plugin",
            "--device-plugin-dir",
            str(node.kubelet.device_plugins),
            "--cdi-dir",
            str(node.cdi_dir),
            "--pod-resources-socket",
            str(node.kubelet.pod_resources_socket),
            "--metrics-port",
            str(free_port()),
            "--node-name",
            name,
        ],
        env={**node_env(node, sandbox.kubeconfig_of("device-plugin")), **device_plugin_env(sandbox.state_dir)},
        ready=node_offers_gpus(sandbox.kubeconfig, name),
    )


def _node_status(kubeconfig: Path, name: str) -> dict[str, Any]:
    from kubernetes import client

    from core.kube import new_api_client

    with new_api_client(kubeconfig) as api:
        try:
            return dict(client.CoreV1Api(api).read_node(name).to_dict().get("status") or {})
        except client.ApiException:
            return {}


def node_offers_gpus(kubeconfig: Path, name: str, resource: str = "nvidia.com/gpu") -> Any:
    """Ready when the real kubelet reports the device plugin's GPUs as allocatable."""
    return lambda: int((_node_status(kubeconfig, name).get("allocatable") or {}).get(resource, "0")) > 0


def published_slices(kubeconfig: Path, name: str) -> Any:
    """Ready when the DRA driver has published its ResourceSlices for the node."""
    from kubernetes import client

    from core.kube import new_api_client

    def check() -> bool:
        with new_api_client(kubeconfig) as api:
            slices: Any = client.CustomObjectsApi(api).list_cluster_custom_object(  # plain JSON
                "resource.k8s.io", "v1", "resourceslices", field_selector=f"spec.nodeName={name}"
            )
        return bool(slices.get("items"))

    return check


def node_env(node: NodePaths, kubeconfig: Path) -> dict[str, str]:
    """What every daemon of ``node`` reads: its node, its board, its fabric socket, its kubeconfig."""
    return {
        "GPUCAAS_NODE_NAME": node.name,
        "GPUCAAS_KUBECONFIG": str(kubeconfig),
        "KUBECONFIG": str(kubeconfig),
        "GPUCAAS_SYSFS_ROOT": str(node.sysfs),
        "GPUCAAS_DEV_ROOT": str(node.dev),
        "GPUCAAS_FABRIC_SOCKET": str(node.fabric_socket),
    }


def fabric_env(node: NodePaths, kubeconfig: Path) -> dict[str, str]:
    """The fabric service of a sandbox node: FM simulator on the fake board, service VM on libvirt's test driver."""
    return {
        "GPUCAAS_FABRIC_NODE_NAME": node.name,
        "GPUCAAS_FABRIC_SOCKET": str(node.fabric_socket),
        "GPUCAAS_FABRIC_STATE_DIR": str(node.fabric_state_dir),
        "GPUCAAS_FABRIC_SYSFS_ROOT": str(node.sysfs),
        # The simulator only when asked for, and as Fabric Manager on H100 behaves: no PCI bus
        # id or UUID in partition info (the board's layout maps module ids), restart mode after
        # the service VM's first boot (docs/fabric-manager.md).
        "GPUCAAS_FABRIC_FM_BACKEND": "simulator",
        "GPUCAAS_FABRIC_SIMULATOR_H100": "true",
        "GPUCAAS_FABRIC_BOARD": str(node.board / "board.json"),
        "GPUCAAS_FABRIC_SIMULATE_FM_IN_VM": "true",
        "GPUCAAS_FABRIC_LIBVIRT_URI": "test:///default",
        "GPUCAAS_FABRIC_DOMAIN_TYPE": "test",
        "GPUCAAS_FABRIC_DOMAIN_NAME": f"gpucaas-fabric-{node.name}",
        "GPUCAAS_FABRIC_FM_CHANNEL": "none",
        "GPUCAAS_FABRIC_DISK_IMAGE": str(node.fabric_state_dir / "service-vm.qcow2"),
        "GPUCAAS_FABRIC_KUBECONFIG": str(kubeconfig),
        "GPUCAAS_FABRIC_PUBLISH_INTERVAL_S": "2",
        "GPUCAAS_FABRIC_RELEASE_GRACE_S": "3",
    }


def device_plugin_env(state_dir: Path) -> dict[str, str]:
    """Leases on, golden firmware of the fake board, quick PodResources scans for a lively sandbox."""
    golden = state_dir / "golden-firmware.json"
    if not golden.exists():
        from devtools.fake_sysfs import (
            GOLDEN_ROM_VERSION,
            H100_SXM5_DEVICE,
            golden_rom_sha256,
        )

        golden.write_text(
            json.dumps({H100_SXM5_DEVICE: {"sha256": [golden_rom_sha256()], "versions": [GOLDEN_ROM_VERSION]}})
        )
    return {
        "GPUCAAS_LEASES": "true",
        "GPUCAAS_FIRMWARE_GOLDEN_FILE": str(golden),
        "GPUCAAS_FIRMWARE_ROM_TOGGLE": "false",  # the fake board's rom is a plain file
        "GPUCAAS_POD_RESOURCES_INTERVAL": "1",
        "GPUCAAS_FABRIC_SYNC_GRACE": "3",
        "GPUCAAS_LEASE_INTERVAL": "0.5",
    }


def dra_driver_env(node: NodePaths, kubeconfig: Path) -> dict[str, str]:
    """The DRA driver of a sandbox node: binding conditions on, quick rounds for a lively sandbox."""
    return {
        "GPUCAAS_DRA_NODE_NAME": node.name,
        "GPUCAAS_DRA_KUBECONFIG": str(kubeconfig),
        "GPUCAAS_DRA_REGISTRY_DIR": str(node.kubelet.plugins_registry),
        "GPUCAAS_DRA_PLUGINS_DIR": str(node.kubelet.plugins),
        "GPUCAAS_DRA_STATE_DIR": str(node.dra_state_dir),
        "GPUCAAS_DRA_FABRIC_SOCKET": str(node.fabric_socket),
        "GPUCAAS_DRA_BINDING_CONDITIONS": "true",
        "GPUCAAS_DRA_PUBLISH_INTERVAL_S": "2",
        "GPUCAAS_DRA_BINDING_INTERVAL_S": "0.5",
        "GPUCAAS_DRA_METRICS_PORT": str(free_port()),  # several nodes on one machine
        # no device plugin on the node: the driver writes the CDI spec
        "GPUCAAS_DRA_CDI_DIR": str(node.cdi_dir),
        "GPUCAAS_DRA_SYSFS_ROOT": str(node.sysfs),
        "GPUCAAS_DRA_DEV_ROOT": str(node.dev),
    }
