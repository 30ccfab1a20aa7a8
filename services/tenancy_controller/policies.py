"""Network isolation of a tenancy: the CiliumNetworkPolicy and its NetworkPolicy twin.

Intent (both policies say the same, Cilium is the enforcing one, the Kubernetes
NetworkPolicy is defence in depth should Cilium's policy be removed or another
CNI chained in):

* ingress only from pods of the same namespace (the design's rule);
* egress to pods of the same namespace, to the cluster DNS (port 53 UDP/TCP),
  to the NFS server on ports 2049/111 when ``spec.nfs`` is set, and to public
  internet addresses only when ``spec.network.allowInternet`` is true;
* never to the node (``host``/``remote-node``), the API server, other
  namespaces, private ranges, or link-local 169.254.0.0/16 (cloud metadata
  169.254.169.254).

How that holds in Cilium: once an endpoint is selected by a rule in a direction,
that direction is default-deny; ``toEndpoints`` without a namespace label means
"this namespace"; CIDR rules never match Cilium-managed endpoints or cluster
nodes, so ``0.0.0.0/0`` does not open the node; the internet rule still lists
private ranges and link-local in ``except``; and an ``egressDeny`` (which wins
over every allow) closes 169.254.0.0/16, the node and the API server whatever
other policy is added to the namespace. The DNS rule carries an L7 ``dns`` rule
so Cilium's DNS proxy learns names for ``toFQDNs`` (used when the NFS server is
a host name).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .builders import POLICY_NAME, child_metadata
from .spec import Tenancy

CILIUM_API_VERSION = "cilium.io/v2"
CILIUM_NAMESPACE_LABEL = "k8s:io.kubernetes.pod.namespace"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"

#: Never reachable as "internet": RFC 1918, CGNAT, loopback, link-local (metadata), this-network, multicast, reserved.
PRIVATE_IPV4 = (
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "224.0.0.0/4",
    "240.0.0.0/4",
)
PRIVATE_IPV6 = ("::1/128", "fc00::/7", "fe80::/10", "ff00::/8")
LINK_LOCAL_IPV4 = "169.254.0.0/16"  # includes the cloud metadata address 169.254.169.254
METADATA_IPV6 = "fd00:ec2::254/128"  # AWS IMDS over IPv6
DENIED_ENTITIES = ("host", "remote-node", "kube-apiserver")
NFS_PORTS = (2049, 111)  # nfsd, rpcbind (NFSv3 needs it; v4 only 2049)


@dataclass(frozen=True)
class NetworkConfig:
    """Cluster facts the policies depend on (from the controller settings)."""

    dns_namespace: str = "kube-system"
    dns_labels: dict[str, str] = field(default_factory=lambda: {"k8s-app": "kube-dns"})
    node_cidrs: tuple[str, ...] = ()


def _internet_excepts(config: NetworkConfig, family: int) -> list[str]:
    nodes = [c for c in config.node_cidrs if (":" in c) == (family == 6)]
    return [*(PRIVATE_IPV4 if family == 4 else PRIVATE_IPV6), *nodes]


def _host_cidr(address: str) -> str:
    return f"{address}/128" if ":" in address else f"{address}/32"


def _cilium_ports(ports: Sequence[int]) -> list[dict[str, Any]]:
    return [{"ports": [{"port": str(p), "protocol": proto} for p in ports for proto in ("TCP", "UDP")]}]


def build_cilium_network_policy(tenancy: Tenancy, config: NetworkConfig) -> dict[str, Any]:
    """The tenancy's CiliumNetworkPolicy (cilium.io/v2) ``tenant-isolation``."""
    ns = tenancy.namespace
    same_namespace = [{"matchLabels": {CILIUM_NAMESPACE_LABEL: ns}}]
    dns_selector = {
        CILIUM_NAMESPACE_LABEL: config.dns_namespace,
        **{f"k8s:{k}": v for k, v in config.dns_labels.items()},
    }
    egress: list[dict[str, Any]] = [
        {"toEndpoints": same_namespace},
        {
            "toEndpoints": [{"matchLabels": dns_selector}],
            "toPorts": [
                {
                    "ports": [{"port": "53", "protocol": "UDP"}, {"port": "53", "protocol": "TCP"}],
                    "rules": {"dns": [{"matchPattern": "*"}]},
                }
            ],
        },
    ]
    if tenancy.spec.allow_internet:
        egress.append(
            {
                "toCIDRSet": [
                    {"cidr": "0.0.0.0/0", "except": _internet_excepts(config, 4)},
                    {"cidr": "::/0", "except": _internet_excepts(config, 6)},
                ]
            }
        )
    nfs = tenancy.spec.nfs
    if nfs is not None:
        if nfs.server_ip is not None:
            egress.append({"toCIDR": [_host_cidr(nfs.server)], "toPorts": _cilium_ports(NFS_PORTS)})
        else:
            egress.append({"toFQDNs": [{"matchName": nfs.server}], "toPorts": _cilium_ports(NFS_PORTS)})
    return {
        "apiVersion": CILIUM_API_VERSION,
        "kind": "CiliumNetworkPolicy",
        "metadata": child_metadata(tenancy, POLICY_NAME),
        "spec": {
            "endpointSelector": {},
            "ingress": [{"fromEndpoints": same_namespace}],
            "egress": egress,
            "egressDeny": [
                {"toCIDRSet": [{"cidr": LINK_LOCAL_IPV4}, {"cidr": METADATA_IPV6}]},
                {"toEntities": list(DENIED_ENTITIES)},
            ],
        },
    }


def _np_ports(ports: Sequence[int]) -> list[dict[str, Any]]:
    return [{"protocol": proto, "port": p} for p in ports for proto in ("TCP", "UDP")]


def build_network_policy(
    tenancy: Tenancy, config: NetworkConfig, *, nfs_addresses: Sequence[str] = ()
) -> dict[str, Any]:
    """The Kubernetes NetworkPolicy ``tenant-isolation`` with the same intent.

    NetworkPolicy has no FQDN peers: a host-name NFS server is allowed by the
    addresses it resolved to (``nfs_addresses``, refreshed on every reconcile).
    """
    egress: list[dict[str, Any]] = [
        {"to": [{"podSelector": {}}]},
        {
            "to": [
                {
                    "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: config.dns_namespace}},
                    "podSelector": {"matchLabels": dict(config.dns_labels)},
                }
            ],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
        },
    ]
    if tenancy.spec.allow_internet:
        egress.append(
            {
                "to": [
                    {"ipBlock": {"cidr": "0.0.0.0/0", "except": _internet_excepts(config, 4)}},
                    {"ipBlock": {"cidr": "::/0", "except": _internet_excepts(config, 6)}},
                ]
            }
        )
    nfs = tenancy.spec.nfs
    if nfs is not None:
        addresses = [nfs.server] if nfs.server_ip is not None else sorted(set(nfs_addresses))
        if addresses:
            egress.append(
                {"to": [{"ipBlock": {"cidr": _host_cidr(a)}} for a in addresses], "ports": _np_ports(NFS_PORTS)}
            )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": child_metadata(tenancy, POLICY_NAME),
        "spec": {
            "podSelector": {},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"podSelector": {}}]}],
            "egress": egress,
        },
    }
