"""How the sandbox runs a gpucaas service: the real service through its own ``gpucaas <service>``
command, so that the parts talk over their real protocols (HTTP to kube-apiserver, HTTPS to the
API, gRPC on unix sockets between the kubelet and a node's daemons, HTTP on a unix socket to
the fabric service), under the sandbox's supervisor (:mod:`devtools.processes`), which the
sandbox's console asks to revive a crashed one.
"""

from __future__ import annotations

import sys

from devtools.processes import Child, ReadyCheck, Supervisor


def start_service(
    supervisor: Supervisor, name: str, args: list[str], *, env: dict[str, str], ready: ReadyCheck | None
) -> Child:
    """``python -m gpucaas <args>`` as ``name``, brought up (``ready=None``: not waited for);
    a stop or a kill reaches what the service started too."""
    supervisor.add(
        name,
        [sys.executable, "-m", "gpucaas", *args],
        ready,
        {**env, "PYTHONUNBUFFERED": "1"},
        whole_group=True,
    )
    return supervisor.bring_up(name)
