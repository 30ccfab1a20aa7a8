"""Every builder against the exact wire object it must produce."""

from __future__ import annotations

from services.tenancy_controller import builders, policies
from services.tenancy_controller.spec import NFSSpec, Tenancy, TenancySpec, VolumesSpec, parse_tenancy

UID = "0b5e7c1e-1111-4222-8333-444455556666"
OWNER = {"apiVersion": "gpucaas.dev/v1alpha1", "kind": "Tenancy", "name": "acme", "uid": UID, "controller": True}
LABELS = {"gpucaas.dev/tenancy": "acme", "app.kubernetes.io/managed-by": "gpucaas-tenancy-controller"}
NFS = NFSSpec(server="10.20.0.5", path="/exports/acme", read_only=False, capacity="2Ti")


def tenancy(**spec) -> Tenancy:
    return Tenancy(name="acme", uid=UID, generation=3, spec=TenancySpec(**spec))


def test_namespace_owned_with_pod_security_labels():
    assert builders.build_namespace(tenancy()) == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": "tenant-acme",
            "labels": {
                **LABELS,
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/enforce-version": "latest",
                "pod-security.kubernetes.io/warn": "restricted",
                "pod-security.kubernetes.io/warn-version": "latest",
                "pod-security.kubernetes.io/audit": "restricted",
                "pod-security.kubernetes.io/audit-version": "latest",
            },
            "ownerReferences": [OWNER],
        },
    }


def test_namespace_not_owned_carries_no_owner_reference():
    ns = builders.build_namespace(tenancy(), owned=False, pod_security_level="baseline")
    assert "ownerReferences" not in ns["metadata"]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/warn"] == "restricted"


def test_resource_quota():
    assert builders.build_resource_quota(tenancy(gpu_quota=16, pod_quota=7)) == {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "tenant-quota", "namespace": "tenant-acme", "labels": LABELS, "ownerReferences": [OWNER]},
        "spec": {
            "hard": {
                "requests.nvidia.com/gpu": "16",
                "pods": "7",
                "persistentvolumeclaims": "1",
                "services.loadbalancers": "0",
                "services.nodeports": "0",
            }
        },
    }


def test_resource_quota_caps_the_volumes_of_their_storage_class_only():
    hard = builders.build_resource_quota(tenancy(volumes=VolumesSpec("gpucaas-volumes", "100Gi", 10)))["spec"]["hard"]
    assert hard["persistentvolumeclaims"] == "11"  # the NFS claim and ten volumes
    assert hard["gpucaas-volumes.storageclass.storage.k8s.io/requests.storage"] == "100Gi"
    assert hard["gpucaas-volumes.storageclass.storage.k8s.io/persistentvolumeclaims"] == "10"
    assert "requests.storage" not in hard  # the NFS claim's capacity is not the volumes' quota


def test_the_volume_allowance_is_read_from_the_spec():
    body = {
        "metadata": {"name": "acme", "uid": UID},
        "spec": {"volumes": {"storageClassName": "nfs-csi", "storageQuota": "1Ti", "maxVolumes": 3}},
    }
    assert parse_tenancy(body).spec.volumes == VolumesSpec("nfs-csi", "1Ti", 3)
    assert parse_tenancy({"metadata": {"name": "acme"}, "spec": {}}).spec.volumes is None


def test_limit_range():
    assert builders.build_limit_range(tenancy()) == {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": "tenant-limits", "namespace": "tenant-acme", "labels": LABELS, "ownerReferences": [OWNER]},
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    "default": {"cpu": "2", "memory": "8Gi"},
                    "defaultRequest": {"cpu": "500m", "memory": "1Gi"},
                    "min": {"memory": "128Mi"},
                }
            ]
        },
    }


def test_persistent_volume():
    assert builders.build_persistent_volume(tenancy(nfs=NFS), NFS) == {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "tenant-acme-storage", "labels": LABELS, "ownerReferences": [OWNER]},
        "spec": {
            "capacity": {"storage": "2Ti"},
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "volumeMode": "Filesystem",
            "mountOptions": ["nfsvers=4.1", "hard", "noresvport"],
            "nfs": {"server": "10.20.0.5", "path": "/exports/acme", "readOnly": False},
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": "tenant-acme",
                "name": "tenant-storage",
            },
        },
    }


def test_persistent_volume_claim():
    assert builders.build_persistent_volume_claim(tenancy(nfs=NFS), NFS) == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": "tenant-storage",
            "namespace": "tenant-acme",
            "labels": LABELS,
            "ownerReferences": [OWNER],
        },
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": "2Ti"}},
            "storageClassName": "",
            "volumeMode": "Filesystem",
            "volumeName": "tenant-acme-storage",
        },
    }


PRIVATE4 = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "224.0.0.0/4",
    "240.0.0.0/4",
]
PRIVATE6 = ["::1/128", "fc00::/7", "fe80::/10", "ff00::/8"]
DNS_PORTS = [{"port": "53", "protocol": "UDP"}, {"port": "53", "protocol": "TCP"}]
NFS_PORTS = [
    {
        "ports": [
            {"port": "2049", "protocol": "TCP"},
            {"port": "2049", "protocol": "UDP"},
            {"port": "111", "protocol": "TCP"},
            {"port": "111", "protocol": "UDP"},
        ]
    }
]


def test_cilium_policy_closed_tenancy():
    got = policies.build_cilium_network_policy(tenancy(), policies.NetworkConfig())
    assert got == {
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumNetworkPolicy",
        "metadata": {
            "name": "tenant-isolation",
            "namespace": "tenant-acme",
            "labels": LABELS,
            "ownerReferences": [OWNER],
        },
        "spec": {
            "endpointSelector": {},
            "ingress": [{"fromEndpoints": [{"matchLabels": {"k8s:io.kubernetes.pod.namespace": "tenant-acme"}}]}],
            "egress": [
                {"toEndpoints": [{"matchLabels": {"k8s:io.kubernetes.pod.namespace": "tenant-acme"}}]},
                {
                    "toEndpoints": [
                        {"matchLabels": {"k8s:io.kubernetes.pod.namespace": "kube-system", "k8s:k8s-app": "kube-dns"}}
                    ],
                    "toPorts": [{"ports": DNS_PORTS, "rules": {"dns": [{"matchPattern": "*"}]}}],
                },
            ],
            "egressDeny": [
                {"toCIDRSet": [{"cidr": "169.254.0.0/16"}, {"cidr": "fd00:ec2::254/128"}]},
                {"toEntities": ["host", "remote-node", "kube-apiserver"]},
            ],
        },
    }


def test_cilium_policy_internet_and_nfs_by_ip_and_public_node_range():
    config = policies.NetworkConfig(node_cidrs=("203.0.113.0/24",))
    egress = policies.build_cilium_network_policy(tenancy(allow_internet=True, nfs=NFS), config)["spec"]["egress"]
    assert egress[2:] == [
        {
            "toCIDRSet": [
                {"cidr": "0.0.0.0/0", "except": [*PRIVATE4, "203.0.113.0/24"]},
                {"cidr": "::/0", "except": PRIVATE6},
            ]
        },
        {"toCIDR": ["10.20.0.5/32"], "toPorts": NFS_PORTS},
    ]


def test_cilium_policy_nfs_by_host_name_uses_fqdn():
    nfs = NFSSpec(server="nfs.corp.example", path="/x")
    egress = policies.build_cilium_network_policy(tenancy(nfs=nfs), policies.NetworkConfig())["spec"]["egress"]
    assert egress[2:] == [{"toFQDNs": [{"matchName": "nfs.corp.example"}], "toPorts": NFS_PORTS}]


def test_network_policy_closed_tenancy():
    assert policies.build_network_policy(tenancy(), policies.NetworkConfig()) == {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": "tenant-isolation",
            "namespace": "tenant-acme",
            "labels": LABELS,
            "ownerReferences": [OWNER],
        },
        "spec": {
            "podSelector": {},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"podSelector": {}}]}],
            "egress": [
                {"to": [{"podSelector": {}}]},
                {
                    "to": [
                        {
                            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                        }
                    ],
                    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                },
            ],
        },
    }


def test_network_policy_internet_and_nfs_host_name_resolved():
    nfs = NFSSpec(server="nfs.corp.example", path="/x")
    egress = policies.build_network_policy(
        tenancy(allow_internet=True, nfs=nfs),
        policies.NetworkConfig(),
        nfs_addresses=["10.9.0.8", "10.9.0.7", "10.9.0.8"],
    )["spec"]["egress"]
    nfs_ports = [
        {"protocol": "TCP", "port": 2049},
        {"protocol": "UDP", "port": 2049},
        {"protocol": "TCP", "port": 111},
        {"protocol": "UDP", "port": 111},
    ]
    assert egress[2:] == [
        {
            "to": [
                {"ipBlock": {"cidr": "0.0.0.0/0", "except": PRIVATE4}},
                {"ipBlock": {"cidr": "::/0", "except": PRIVATE6}},
            ]
        },
        {"to": [{"ipBlock": {"cidr": "10.9.0.7/32"}}, {"ipBlock": {"cidr": "10.9.0.8/32"}}], "ports": nfs_ports},
    ]


def test_resource_quota_with_cpu_and_memory():
    hard = builders.build_resource_quota(tenancy(gpu_quota=16, cpu_quota="392", memory_quota="3600Gi"))["spec"]["hard"]
    assert hard == {
        "requests.nvidia.com/gpu": "16",
        "pods": "50",
        "persistentvolumeclaims": "1",
        "services.loadbalancers": "0",
        "services.nodeports": "0",
        "limits.cpu": "392",
        "limits.memory": "3600Gi",
        "requests.hugepages-1Gi": "3600Gi",
    }


def test_api_secrets_role_binding():
    access = builders.ApiAccess("gpucaas-system", "gpucaas-api", "gpucaas-api-tenant-secrets")
    assert builders.build_api_secrets_role_binding(tenancy(), access) == {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": "gpucaas-api-tenant-secrets",
            "namespace": "tenant-acme",
            "labels": LABELS,
            "ownerReferences": [OWNER],
        },
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "gpucaas-api-tenant-secrets",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "gpucaas-api", "namespace": "gpucaas-system"}],
    }
