"""Endpoints: a container's declared HTTP ports, served by the cluster's ingress controller.

A container that declares ``ports: [{"port": 8080, "public": false}]`` gets, once its pod
exists, three kinds of objects in its tenant namespace, each owned by the pod (Kubernetes'
garbage collector removes them with it; the API's worker also removes them as soon as the
container ends, since a finished pod is kept for its log):

- a Service ``gpucaas-<id>`` selecting the pod by its container label, one port per
  declared port;
- an Ingress per visibility, ``gpucaas-<id>-private`` and ``gpucaas-<id>-public``, of the
  operator's ingress class, one rule per port for the host ``<id>-<port>.<endpoint domain>``
  with TLS on (no secret named: the controller serves its default certificate, the
  operator's wildcard for the endpoint domain, so no key is ever copied into a tenant
  namespace). The private one carries the operator's authentication annotations: with
  Traefik, a forwardAuth middleware that asks the API's ``/v1/endpoint-auth`` whether the
  request's bearer token belongs to the container's tenancy;
- a CiliumNetworkPolicy that admits traffic to the declared ports from the ingress
  controller's pods only (the tenancy's own policy admits nothing from outside it).

The URL a tenant is given is ``https://<id>-<port>.<domain>``: one DNS label, so one
wildcard certificate and one wildcard DNS record serve every endpoint.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core import crds

MAX_PORTS = 8
MANAGED_BY = "gpucaas-api"
#: a Service port's name must be a DNS label; the port number makes it unique
PORT_NAME_PREFIX = "http-"
INGRESS_API = ("networking.k8s.io", "v1", "ingresses")
CILIUM_POLICY_API = ("cilium.io", "v2", "ciliumnetworkpolicies")
#: what ``Host`` a request to an endpoint carries, before the domain: ``<container id>-<port>``
_HOST_LABEL = re.compile(r"^([0-9a-f]{1,32})-([0-9]{1,5})$")
VISIBILITIES = ("private", "public")


@dataclass(frozen=True)
class Config:
    """The operator's endpoint settings (``GPUCAAS_ENDPOINT_*``)."""

    domain: str
    ingress_class: str = "traefik"
    annotations: Mapping[str, str] = field(default_factory=dict)
    auth_annotations: Mapping[str, str] = field(default_factory=dict)
    ingress_namespace: str = "traefik"
    ingress_labels: Mapping[str, str] = field(default_factory=dict)
    #: addresses of an ingress controller that is not a pod of the cluster (CIDRs)
    ingress_cidrs: tuple[str, ...] = ()


def object_name(container_id: str) -> str:
    """The Service's name (the pod's own name: one per container)."""
    return f"gpucaas-{container_id}"


def ingress_name(container_id: str, visibility: str) -> str:
    return f"{object_name(container_id)}-{visibility}"


def policy_name(container_id: str) -> str:
    return f"{object_name(container_id)}-endpoints"


def host(container_id: str, port: int, domain: str) -> str:
    return f"{container_id}-{port}.{domain}"


def url(container_id: str, port: int, domain: str) -> str:
    return f"https://{host(container_id, port, domain)}"


def parse_host(value: str, domain: str) -> tuple[str, int] | None:
    """``<id>-<port>.<domain>`` (any case, an optional ``:443``) → (id, port); None for any other host."""
    name = value.strip().lower()
    if name.endswith(":443"):
        name = name[: -len(":443")]
    suffix = "." + domain.lower().strip(".")
    if not name.endswith(suffix):
        return None
    m = _HOST_LABEL.match(name[: -len(suffix)])
    if m is None:
        return None
    port = int(m.group(2))
    return (m.group(1), port) if 1 <= port <= 65535 else None


def public_endpoints(container_id: str, ports: Sequence[Mapping[str, Any]] | None, domain: str) -> list[dict[str, Any]]:
    """The ``endpoints`` a container lists: ``{"port", "url", "public"}`` per declared port."""
    return [
        {"port": int(p["port"]), "url": url(container_id, int(p["port"]), domain), "public": bool(p["public"])}
        for p in ports or ()
    ]


def declared(ports: Sequence[Mapping[str, Any]] | None, port: int) -> Mapping[str, Any] | None:
    return next((p for p in ports or () if int(p["port"]) == port), None)


def _labels(container_id: str, tenancy: str) -> dict[str, str]:
    return {crds.LABEL_CONTAINER: container_id, crds.LABEL_TENANCY: tenancy, crds.LABEL_MANAGED_BY: MANAGED_BY}


def _meta(name: str, container_id: str, tenancy: str, owner: Mapping[str, Any] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": crds.tenant_namespace(tenancy),
        "labels": _labels(container_id, tenancy),
    }
    if owner is not None:  # the pod: the garbage collector deletes these with it
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": owner["name"], "uid": owner["uid"], "blockOwnerDeletion": False}
        ]
    return meta


def service(
    container_id: str, tenancy: str, ports: Sequence[Mapping[str, Any]], owner: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(object_name(container_id), container_id, tenancy, owner),
        "spec": {
            "type": "ClusterIP",
            "selector": {crds.LABEL_CONTAINER: container_id},
            "ports": [
                {
                    "name": f"{PORT_NAME_PREFIX}{int(p['port'])}",
                    "protocol": "TCP",
                    "port": int(p["port"]),
                    "targetPort": int(p["port"]),
                }
                for p in ports
            ],
        },
    }


def ingresses(
    container_id: str,
    tenancy: str,
    ports: Sequence[Mapping[str, Any]],
    *,
    domain: str,
    ingress_class: str,
    annotations: Mapping[str, str],
    private_annotations: Mapping[str, str],
    owner: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One Ingress per visibility that has ports: the private one with ``private_annotations``."""
    out = []
    for visibility in VISIBILITIES:
        chosen = [p for p in ports if bool(p["public"]) == (visibility == "public")]
        if not chosen:
            continue
        hosts = [host(container_id, int(p["port"]), domain) for p in chosen]
        notes = {**annotations, **(private_annotations if visibility == "private" else {})}
        meta = _meta(ingress_name(container_id, visibility), container_id, tenancy, owner)
        if notes:
            meta["annotations"] = dict(notes)
        out.append(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "Ingress",
                "metadata": meta,
                "spec": {
                    "ingressClassName": ingress_class,
                    "tls": [{"hosts": hosts}],
                    "rules": [
                        {
                            "host": h,
                            "http": {
                                "paths": [
                                    {
                                        "path": "/",
                                        "pathType": "Prefix",
                                        "backend": {
                                            "service": {
                                                "name": object_name(container_id),
                                                "port": {"number": int(p["port"])},
                                            }
                                        },
                                    }
                                ]
                            },
                        }
                        for h, p in zip(hosts, chosen, strict=True)
                    ],
                },
            }
        )
    return out


def network_policy(
    container_id: str,
    tenancy: str,
    ports: Sequence[Mapping[str, Any]],
    *,
    ingress_namespace: str,
    ingress_labels: Mapping[str, str],
    ingress_cidrs: Sequence[str] = (),
    owner: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Admit the ingress controller's pods (and its addresses outside the cluster, when it runs
    there) to the declared ports, and nothing else from outside."""
    peer = {
        "matchLabels": {
            "k8s:io.kubernetes.pod.namespace": ingress_namespace,
            **{f"k8s:{k}": v for k, v in ingress_labels.items()},
        }
    }
    to_ports = [{"ports": [{"port": str(int(p["port"])), "protocol": "TCP"} for p in ports]}]
    rules: list[dict[str, Any]] = [{"fromEndpoints": [peer], "toPorts": to_ports}]
    if ingress_cidrs:
        rules.append({"fromCIDR": list(ingress_cidrs), "toPorts": to_ports})
    return {
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumNetworkPolicy",
        "metadata": _meta(policy_name(container_id), container_id, tenancy, owner),
        "spec": {
            "endpointSelector": {"matchLabels": {crds.LABEL_CONTAINER: container_id}},
            "ingress": rules,
        },
    }


def objects(
    container_id: str,
    tenancy: str,
    ports: Sequence[Mapping[str, Any]],
    config: Config,
    owner: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Everything that serves a container's ports: the policy first (nothing reaches the pod
    before it admits the controller), the Service, then the Ingresses."""
    return [
        network_policy(
            container_id,
            tenancy,
            ports,
            ingress_namespace=config.ingress_namespace,
            ingress_labels=config.ingress_labels,
            ingress_cidrs=config.ingress_cidrs,
            owner=owner,
        ),
        service(container_id, tenancy, ports, owner),
        *ingresses(
            container_id,
            tenancy,
            ports,
            domain=config.domain,
            ingress_class=config.ingress_class,
            annotations=config.annotations,
            private_annotations=config.auth_annotations,
            owner=owner,
        ),
    ]


def object_refs(container_id: str, tenancy: str) -> list[dict[str, Any]]:
    """What :func:`objects` may have made for a container, by kind and name (for deletion):
    the Ingresses first, so the controller stops routing before the Service goes."""
    ns = crds.tenant_namespace(tenancy)

    def ref(api_version: str, kind: str, name: str) -> dict[str, Any]:
        return {"apiVersion": api_version, "kind": kind, "metadata": {"namespace": ns, "name": name}}

    return [
        *(ref("networking.k8s.io/v1", "Ingress", ingress_name(container_id, v)) for v in VISIBILITIES),
        ref("v1", "Service", object_name(container_id)),
        ref("cilium.io/v2", "CiliumNetworkPolicy", policy_name(container_id)),
    ]
