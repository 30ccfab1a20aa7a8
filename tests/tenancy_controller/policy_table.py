"""The (source, destination) table the generated policies are judged by; also printed into the README.

Run ``python -m tests.tenancy_controller.policy_table`` for the Markdown table.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.tenancy_controller import policies, reconcile

from .factories import tenancy_body
from .policy_eval import Flow, Peer, cilium_allows, network_policy_allows

NODE_CIDRS = ("203.0.113.0/24",)  # a cluster whose nodes have public addresses
NETWORK = policies.NetworkConfig(node_cidrs=NODE_CIDRS)


def _pod(ns: str, ip: str, **labels: str) -> Peer:
    return Peer(ip=ip, kind="pod", namespace=ns, labels=labels, namespace_labels={"kubernetes.io/metadata.name": ns})


A1 = _pod("tenant-a", "10.244.1.10", app="train")
A2 = _pod("tenant-a", "10.244.2.11", app="serve")
B1 = _pod("tenant-b", "10.244.1.20", app="train")
DNS = _pod("kube-system", "10.244.0.5", **{"k8s-app": "kube-dns"})
METRICS = _pod("kube-system", "10.244.0.6", **{"k8s-app": "metrics-server"})
METADATA = Peer(ip="169.254.169.254", kind="external")
HOST = Peer(ip="10.0.0.5", kind="host")
REMOTE_NODE = Peer(ip="10.0.0.6", kind="remote-node")
PUBLIC_NODE = Peer(ip="203.0.113.10", kind="remote-node")
APISERVER = Peer(ip="10.0.0.2", kind="kube-apiserver")
NFS = Peer(ip="10.20.0.5", kind="external")
NFS_BY_NAME = Peer(ip="10.20.0.7", kind="external", fqdn="nfs.corp.example")
OTHER_PRIVATE = Peer(ip="10.20.0.6", kind="external")
LAN = Peer(ip="192.168.1.10", kind="external")
INTERNET = Peer(ip="93.184.216.34", kind="external")
INTERNET6 = Peer(ip="2606:2800:220:1:248:1893:25c8:1946", kind="external")

#: Tenancy variants: a closed one, and one with internet and NFS (by IP, or by host name).
VARIANTS = {
    "closed": dict(allow_internet=False),
    "internet+nfs": dict(allow_internet=True, nfs={"server": "10.20.0.5", "path": "/exports/a"}),
    "nfs-by-name": dict(allow_internet=False, nfs={"server": "nfs.corp.example", "path": "/exports/a"}),
}
NFS_RESOLVED = {"nfs.corp.example": ["10.20.0.7"]}


@dataclass(frozen=True)
class Row:
    what: str
    flow: Flow
    expected: dict[str, bool]  # variant -> allowed


def _row(what: str, src: Peer, dst: Peer, port: int, proto: str, closed: bool, open_: bool, by_name: bool) -> Row:
    return Row(what, Flow(src, dst, port, proto), {"closed": closed, "internet+nfs": open_, "nfs-by-name": by_name})


ROWS = [
    _row("same namespace pod, TCP 8080", A1, A2, 8080, "TCP", True, True, True),
    _row("other tenant's pod, TCP 8080", A1, B1, 8080, "TCP", False, False, False),
    _row("other tenant's pod -> this tenant, TCP 8080", B1, A1, 8080, "TCP", False, False, False),
    _row("kube-dns, UDP 53", A1, DNS, 53, "UDP", True, True, True),
    _row("kube-dns, TCP 53", A1, DNS, 53, "TCP", True, True, True),
    _row("kube-dns, TCP 8080 (not DNS)", A1, DNS, 8080, "TCP", False, False, False),
    _row("other kube-system pod, TCP 443", A1, METRICS, 443, "TCP", False, False, False),
    _row("cloud metadata 169.254.169.254, TCP 80", A1, METADATA, 80, "TCP", False, False, False),
    _row("own node (kubelet) 10.0.0.5, TCP 10250", A1, HOST, 10250, "TCP", False, False, False),
    _row("other node 10.0.0.6, TCP 22", A1, REMOTE_NODE, 22, "TCP", False, False, False),
    _row("node with public IP 203.0.113.10, TCP 443", A1, PUBLIC_NODE, 443, "TCP", False, False, False),
    _row("kube-apiserver 10.0.0.2, TCP 6443", A1, APISERVER, 6443, "TCP", False, False, False),
    _row("NFS server 10.20.0.5, TCP 2049", A1, NFS, 2049, "TCP", False, True, False),
    _row("NFS server 10.20.0.5, UDP 111", A1, NFS, 111, "UDP", False, True, False),
    _row("NFS server 10.20.0.5, TCP 22 (not NFS)", A1, NFS, 22, "TCP", False, False, False),
    _row("NFS server by name nfs.corp.example, TCP 2049", A1, NFS_BY_NAME, 2049, "TCP", False, False, True),
    _row("other private host 10.20.0.6, TCP 2049", A1, OTHER_PRIVATE, 2049, "TCP", False, False, False),
    _row("LAN host 192.168.1.10, TCP 443", A1, LAN, 443, "TCP", False, False, False),
    _row("internet 93.184.216.34, TCP 443", A1, INTERNET, 443, "TCP", False, True, False),
    _row("internet IPv6, TCP 443", A1, INTERNET6, 443, "TCP", False, True, False),
]


def policies_for(variant: str) -> tuple[list[dict], list[dict]]:
    """(CiliumNetworkPolicies, NetworkPolicies) in force: tenant-a in ``variant``, tenant-b closed."""
    cnps, nps = [], []
    for name, spec in (("a", VARIANTS[variant]), ("b", VARIANTS["closed"])):
        body = tenancy_body(name, **spec)
        nfs = (spec.get("nfs") or {}).get("server")
        plan = reconcile.reconcile_tenancy(body, network=NETWORK, nfs_addresses=NFS_RESOLVED.get(nfs or "", []))
        for obj in plan.objects:
            if obj["kind"] == "CiliumNetworkPolicy":
                cnps.append(obj)
            elif obj["kind"] == "NetworkPolicy":
                nps.append(obj)
    return cnps, nps


def evaluate(variant: str, flow: Flow) -> tuple[bool, bool]:
    cnps, nps = policies_for(variant)
    return cilium_allows(cnps, flow), network_policy_allows(nps, flow)


def markdown() -> str:
    head = "| flow (from a pod of tenancy `a`) | closed | internet + NFS 10.20.0.5 | NFS by host name |"
    lines = [head, "|---|---|---|---|"]
    for row in ROWS:
        cells = []
        for variant in VARIANTS:
            cil, np_ = evaluate(variant, row.flow)
            mark = "allow" if cil and np_ else "deny" if not cil and not np_ else f"cilium {cil} / np {np_}"
            cells.append(mark)
        lines.append(f"| {row.what} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    sys.stdout.write(markdown() + "\n")
