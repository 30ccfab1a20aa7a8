"""The kube-scheduler extender protocol v1 (``k8s.io/kube-scheduler/extender/v1``).

Pure functions from request bytes to response bytes, so that the HTTP transport
(``server.py``) and the benchmark run the very same code. kube-scheduler encodes
the Go structs without JSON tags, so the keys are the capitalised Go field names:

* ``ExtenderArgs`` {``Pod``, ``Nodes`` (a v1.NodeList, when the extender is not
  nodeCacheCapable), ``NodeNames`` (when it is)} — the body of filter and
  prioritize;
* ``ExtenderFilterResult`` {``Nodes``, ``NodeNames``, ``FailedNodes``,
  ``FailedAndUnresolvableNodes``, ``Error``};
* ``HostPriorityList`` [{``Host``, ``Score``}], scores 0..``MaxExtenderPriority`` (10);
* ``ExtenderBindingArgs`` {``PodName``, ``PodNamespace``, ``PodUID``, ``Node``} ->
  ``ExtenderBindingResult`` {``Error``}.

Go's decoder matches keys case-insensitively, so lower-case keys are accepted too;
replies always use the Go names. Whatever form the candidates came in (names or
a NodeList) is the form the filter answers in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from core import dra
from services.placement.errors import InvalidRequest
from services.placement.fleet import FleetIndex

GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    pod: dict[str, Any]
    node_names: list[str] | None
    nodes: dict[str, Any] | None  # the v1.NodeList, as sent

    def candidate_names(self) -> list[str]:
        if self.node_names is not None:
            return self.node_names
        assert self.nodes is not None
        return [item["metadata"]["name"] for item in self.nodes.get("items") or []]


@dataclass(frozen=True, slots=True)
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


def _get(obj: dict[str, Any], key: str) -> Any:
    """Go-style field lookup: exact Go name first, then case-insensitively."""
    if key in obj:
        return obj[key]
    lower = key.lower()
    for k, v in obj.items():
        if k.lower() == lower:
            return v
    return None


def _load(body: bytes | str, what: str) -> dict[str, Any]:
    try:
        data = orjson.loads(body)
    except (orjson.JSONDecodeError, TypeError) as exc:
        raise InvalidRequest("body", f"{what} must be a JSON object: {exc}") from exc
    if not isinstance(data, dict):
        raise InvalidRequest("body", f"{what} must be a JSON object, got {type(data).__name__}")
    return data


def parse_extender_args(body: bytes | str) -> ExtenderArgs:
    data = _load(body, "ExtenderArgs")
    pod = _get(data, "Pod")
    if not isinstance(pod, dict):
        raise InvalidRequest("Pod", "must be a v1.Pod object")
    names = _get(data, "NodeNames")
    nodes = _get(data, "Nodes")
    if names is not None:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise InvalidRequest("NodeNames", "must be a list of node name strings")
        return ExtenderArgs(pod, names, None)
    if nodes is not None:
        items = nodes.get("items") if isinstance(nodes, dict) else None
        if not isinstance(items, list) or not all(
            isinstance(i, dict) and isinstance((i.get("metadata") or {}).get("name"), str) for i in items
        ):
            raise InvalidRequest("Nodes", "must be a v1.NodeList whose items have metadata.name")
        return ExtenderArgs(pod, None, nodes)
    raise InvalidRequest("NodeNames", "one of NodeNames (nodeCacheCapable) or Nodes must be given")


def _quantity(value: Any, where: str) -> int:
    if isinstance(value, bool):
        raise InvalidRequest(where, "must be a whole number of GPUs")
    if isinstance(value, int):
        n = value
    elif isinstance(value, str) and value.strip().isdigit():
        n = int(value.strip())
    else:
        raise InvalidRequest(where, f"must be a whole number of GPUs, got {value!r}")
    if n < 0:
        raise InvalidRequest(where, f"must be >= 0, got {n}")
    return n


def _container_gpus(container: dict[str, Any], resource: str, where: str) -> int:
    resources = container.get("resources") or {}
    for kind in ("limits", "requests"):  # extended resources: requests == limits
        values = resources.get(kind) or {}
        if resource in values:
            return _quantity(values[resource], f"{where}.resources.{kind}[{resource}]")
    return 0


def pod_gpu_count(pod: dict[str, Any], resource: str = GPU_RESOURCE) -> int:
    """GPUs the pod asks for: its extended resource (:func:`extended_resource_gpus`) or, for
    a pod without it, the GPUs of its gpucaas DRA claims (see :func:`_claimed_gpus`)."""
    return extended_resource_gpus(pod, resource) or _claimed_gpus(pod.get("spec") or {})


def extended_resource_gpus(pod: dict[str, Any], resource: str = GPU_RESOURCE) -> int:
    """GPUs the pod requests as the extended resource, as the kubelet's device manager counts
    them: the sum over containers, or the largest init container."""
    spec = pod.get("spec") or {}
    containers = spec.get("containers") or []
    if not isinstance(containers, list):
        raise InvalidRequest("Pod.spec.containers", "must be a list")
    total = sum(_container_gpus(c, resource, f"Pod.spec.containers[{i}]") for i, c in enumerate(containers))
    init = max(
        (
            _container_gpus(c, resource, f"Pod.spec.initContainers[{i}]")
            for i, c in enumerate(spec.get("initContainers") or [])
        ),
        default=0,
    )
    return max(total, init)


def _claimed_gpus(spec: dict[str, Any]) -> int:
    """GPUs of the pod's ResourceClaims made from gpucaas' templates (allocation.mode=dra).

    A pod-level claim (``spec.resourceClaims``) counts once however many containers use it
    (``resources.claims``), as the devices are allocated once per claim (Kubernetes docs,
    "Dynamic Resource Allocation"); the template name says the size (``gpucaas-gpus-N``).
    Claims from other templates or named directly are not gpucaas' and count nothing.
    """
    claims = spec.get("resourceClaims") or []
    if not isinstance(claims, list):
        raise InvalidRequest("Pod.spec.resourceClaims", "must be a list")
    used: set[str] = set()
    for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        for ref in ((c.get("resources") if isinstance(c, dict) else None) or {}).get("claims") or []:
            if isinstance(ref, dict) and isinstance(ref.get("name"), str):
                used.add(ref["name"])
    total = 0
    for claim in claims:
        if not isinstance(claim, dict) or claim.get("name") not in used:
            continue
        total += dra.gpus_of_claim_template(claim.get("resourceClaimTemplateName")) or 0
    return total


def pod_ref(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def build_filter_result(
    args: ExtenderArgs,
    passed: list[str],
    failed: dict[str, str],
    unresolvable: dict[str, str],
    error: str = "",
) -> dict[str, Any]:
    """An ``ExtenderFilterResult`` in the form the candidates came in."""
    result: dict[str, Any] = {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": failed,
        "FailedAndUnresolvableNodes": unresolvable,
        "Error": error,
    }
    if args.node_names is not None:
        result["NodeNames"] = passed
    else:
        assert args.nodes is not None
        keep = set(passed)
        node_list = {k: v for k, v in args.nodes.items() if k != "items"}
        node_list["items"] = [i for i in args.nodes["items"] if i["metadata"]["name"] in keep]
        result["Nodes"] = node_list
    return result


def build_host_priority_list(scores: list[tuple[str, int]]) -> list[dict[str, Any]]:
    return [{"Host": host, "Score": score} for host, score in scores]


def parse_binding_args(body: bytes | str) -> BindingArgs:
    data = _load(body, "ExtenderBindingArgs")
    values = {}
    for key in ("PodName", "PodNamespace", "Node"):
        value = _get(data, key)
        if not isinstance(value, str) or not value:
            raise InvalidRequest(key, "must be a non-empty string")
        values[key] = value
    uid = _get(data, "PodUID") or ""
    if not isinstance(uid, str):
        raise InvalidRequest("PodUID", "must be a string")
    return BindingArgs(values["PodName"], values["PodNamespace"], uid, values["Node"])


def build_binding_result(error: str = "") -> dict[str, Any]:
    return {"Error": error}


def filter_result(index: FleetIndex, args: ExtenderArgs, resource: str = GPU_RESOURCE) -> dict[str, Any]:
    """The candidates that give the pod a whole partition of its size, narrowed to the best fit
    (:meth:`FleetIndex.filter`'s ``best_only``): the device-plugin mode's kube-scheduler
    configuration then calls no prioritize."""
    size = pod_gpu_count(args.pod, resource)
    outcome = index.filter(args.candidate_names(), size, best_only=True)
    return build_filter_result(args, outcome.passed, outcome.failed, outcome.unresolvable)


def prioritize_result(index: FleetIndex, args: ExtenderArgs, resource: str = GPU_RESOURCE) -> list[dict[str, Any]]:
    size = pod_gpu_count(args.pod, resource)
    return build_host_priority_list(index.prioritize(args.candidate_names(), size))


def handle_filter(index: FleetIndex, body: bytes | str, resource: str = GPU_RESOURCE) -> bytes:
    """Filter request bytes -> ``ExtenderFilterResult`` bytes (raises InvalidRequest)."""
    return orjson.dumps(filter_result(index, parse_extender_args(body), resource))


def handle_prioritize(index: FleetIndex, body: bytes | str, resource: str = GPU_RESOURCE) -> bytes:
    """Prioritize request bytes -> ``HostPriorityList`` bytes (raises InvalidRequest)."""
    return orjson.dumps(prioritize_result(index, parse_extender_args(body), resource))
