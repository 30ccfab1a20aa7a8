"""A second ``gpucaas device-plugin`` on a sandbox node, leases off, beside the node's real kubelet.

It registers with the same kubelet as the node's own device plugin, under a resource name of
its own (the kubelet's device manager keeps one plugin per resource), with its own CDI folder
and metrics port, the node's fabric socket, board and PodResources socket. The benchmarks run
it to measure a device plugin without its GPU-lease agent (``benchmarks.footprint``) and to
call it as the kubelet does while the kubelet holds its ListAndWatch stream
(``benchmarks.device_plugin``).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.kit import processes
from benchmarks.kit.report import say

REGISTERED_WITHIN_S = 60.0


def socket_of(node: Any, resource: str) -> Path:
    """The plugin's gRPC socket on ``node``: named after ``resource`` in the kubelet's device-plugin folder."""
    from services.device_plugin.registration import endpoint_name

    return node.kubelet.device_plugins / endpoint_name(resource)


@contextmanager
def beside_kubelet(
    sb: Any, node: Any, folder: Path, *, resource: str, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """The plugin's process, once the node's kubelet offers ``resource``; stopped after.

    ``node``: one of ``sb.nodes``; ``folder``: its own state (CDI specs, golden firmware, its
    log, shown if it never registers); ``resource``: short, since the plugin's socket is named
    after it and a unix socket path must stay under 108 bytes; ``env``: settings over the
    sandbox's device plugin's (same PodResources interval and fabric sync grace by default).
    """
    from devtools.ports import free_port
    from devtools.sandbox import node_daemons
    from devtools.waiting import wait_for

    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "device-plugin.log"
    settings = {
        **node_daemons.device_plugin_env(folder),
        "GPUCAAS_LEASES": "false",
        "GPUCAAS_SYSFS_ROOT": str(node.sysfs),
        "GPUCAAS_DEV_ROOT": str(node.dev),
        "GPUCAAS_FABRIC_SOCKET": str(node.fabric_socket),
        **(env or {}),
    }
    args = processes.gpucaas_command(
        "device-plugin",
        "--device-plugin-dir",
        str(node.kubelet.device_plugins),
        "--resource-name",
        resource,
        "--cdi-dir",
        str(folder / "cdi"),
        "--pod-resources-socket",
        str(node.kubelet.pod_resources_socket),
        "--metrics-port",
        str(free_port()),
        "--node-name",
        node.name,
    )
    plugin = processes.start(args, log, env=settings)
    try:
        try:
            wait_for(
                node_daemons.node_offers_gpus(sb.kubeconfig, node.name, resource=resource),
                REGISTERED_WITHIN_S,
                what=f"the kubelet of {node.name} to offer {resource}",
            )
        except TimeoutError:
            say(log.read_text(errors="replace")[-3000:])
            raise
        yield plugin
    finally:
        processes.stop(plugin)
