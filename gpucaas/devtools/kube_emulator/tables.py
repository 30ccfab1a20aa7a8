"""The ``Table`` format (``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``) of ``kubectl get``.

Modelled on the API server's table convertors:

- custom resources: a ``Name`` column plus the CRD version's ``additionalPrinterColumns``
  (JSONPath, ``type``, ``format``, ``priority``), or ``Age`` when it declares none
  (k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor);
  ``date`` cells are ages; a column whose path finds nothing is empty;
- built-ins: the columns kubectl shows for them (k8s.io/kubernetes/pkg/printers/internalversion/
  printers.go) for the kinds the project uses, ``Name``/``Age`` for the others
  (the server's default convertor shows ``Name`` and ``Created At``);
- ``priority > 0`` columns are shown by kubectl only with ``-o wide``;
- ``includeObject=None|Metadata|Object`` (default ``Metadata``: a
  ``PartialObjectMetadata`` per row).

Ages follow ``HumanDuration`` (k8s.io/apimachinery/pkg/util/duration/duration.go).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gpucaas.devtools.kube_emulator import errors

TABLE_MEDIA = "as=Table"
NAME_COLUMN = {"name": "Name", "type": "string", "format": "name", "priority": 0,
               "description": "Name must be unique within a namespace. More info: "
                              "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"}


def wants_table(accept: str | None) -> bool:
    """Whether the ``Accept`` header asks for ``meta.k8s.io`` Tables (v1 or v1beta1) first."""
    if not accept:
        return False
    for part in accept.split(","):
        params = {p.split("=", 1)[0].strip(): p.split("=", 1)[1].strip()
                  for p in part.split(";")[1:] if "=" in p}
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io" and params.get("v") in ("v1", "v1beta1"):
            return True
        media = part.split(";")[0].strip()
        if media in ("application/json", "*/*", "application/*"):
            return False
    return False


def human_duration(seconds: float) -> str:
    """apimachinery's ``duration.HumanDuration``."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def age(timestamp: Any) -> str:
    if not isinstance(timestamp, str) or not timestamp:
        return "<unknown>"
    try:
        then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    return human_duration((datetime.now(UTC) - then).total_seconds())


# ---- JSONPath (the subset CRD printer columns use) ------------------------------------

_TOKEN = re.compile(r"\.([A-Za-z0-9_\-/$]+)|\[(\d+|\*)\]|\[\?\(@\.([A-Za-z0-9_.\-]+)\s*==\s*['\"]([^'\"]*)['\"]\)\]"
                    r"|\['([^']+)'\]")


def jsonpath(obj: Any, path: str) -> list[Any]:
    """Evaluate a Kubernetes printer-column JSONPath (``.a.b``, ``[0]``, ``[*]``, ``[?(@.k=="v")]``)."""
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    if path.startswith("$"):
        path = path[1:]
    pos, values = 0, [obj]
    while pos < len(path):
        m = _TOKEN.match(path, pos)
        if m is None:
            raise ValueError(f"unsupported JSONPath {path!r} at {pos}")
        pos = m.end()
        field, index, fkey, fval, quoted = m.groups()
        out: list[Any] = []
        for v in values:
            if field is not None or quoted is not None:
                key = field if field is not None else quoted
                if isinstance(v, dict) and key in v:
                    out.append(v[key])
            elif index is not None:
                if isinstance(v, list):
                    if index == "*":
                        out.extend(v)
                    elif int(index) < len(v):
                        out.append(v[int(index)])
            else:
                if isinstance(v, list):
                    for item in v:
                        got = jsonpath(item, "." + fkey)
                        if got and str(got[0]) == fval:
                            out.append(item)
        values = out
    return values


def _cell(values: list[Any], ctype: str) -> Any:
    if not values:
        return None
    value = values[0] if len(values) == 1 else values
    if ctype == "date":
        return age(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    if ctype == "integer" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    return value


# ---- built-in columns -------------------------------------------------------------------

Column = tuple[str, str, int, Callable[[dict[str, Any]], Any]]


def _ready_containers(pod: dict[str, Any]) -> str:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    total = len(spec.get("containers") or [])
    ready = sum(1 for c in status.get("containerStatuses") or [] if c.get("ready"))
    return f"{ready}/{total}"


def _pod_status(pod: dict[str, Any]) -> str:
    """The STATUS kubectl shows: the reason, a waiting/terminated container reason, or the phase."""
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for c in status.get("containerStatuses") or []:
        state = c.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif (state.get("terminated") or {}).get("reason"):
            reason = state["terminated"]["reason"]
    if pod.get("metadata", {}).get("deletionTimestamp"):
        reason = "Terminating"
    return reason


def _restarts(pod: dict[str, Any]) -> int:
    return sum(int(c.get("restartCount") or 0) for c in (pod.get("status") or {}).get("containerStatuses") or [])


def _get(path: str) -> Callable[[dict[str, Any]], Any]:
    def get(obj: dict[str, Any]) -> Any:
        values = jsonpath(obj, path)
        return values[0] if values else None
    return get


def _or_none(fn: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    return lambda obj: "<none>" if fn(obj) in (None, "", []) else fn(obj)


def _join(values: Any) -> str:
    return ",".join(str(v) for v in values) if values else "<none>"


def _access_modes(obj: dict[str, Any], where: str) -> str:
    short = {"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX", "ReadWriteMany": "RWX", "ReadWriteOncePod": "RWOP"}
    modes = (obj.get(where) or {}).get("accessModes") or []
    return ",".join(short.get(m, m) for m in modes)


def _service_ports(svc: dict[str, Any]) -> str:
    ports = (svc.get("spec") or {}).get("ports") or []
    return ",".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in ports) or "<none>"


def _quota_usage(q: dict[str, Any], *, limits: bool) -> str:
    hard = (q.get("spec") or {}).get("hard") or {}
    used = (q.get("status") or {}).get("used") or {}
    return ", ".join(f"{k}: {used.get(k, '0')}/{v}" for k, v in sorted(hard.items())
                     if k.startswith("limits.") == limits)


def _age(obj: dict[str, Any]) -> str:
    return age(obj.get("metadata", {}).get("creationTimestamp"))


AGE: Column = ("Age", "string", 0, _age)
BUILTIN_COLUMNS: dict[tuple[str, str], list[Column]] = {
    ("", "pods"): [
        ("Ready", "string", 0, _ready_containers), ("Status", "string", 0, _pod_status),
        ("Restarts", "string", 0, lambda p: str(_restarts(p))), AGE,
        ("IP", "string", 1, _or_none(_get(".status.podIP"))), ("Node", "string", 1, _or_none(_get(".spec.nodeName"))),
        ("Nominated Node", "string", 1, _or_none(_get(".status.nominatedNodeName"))),
        ("Readiness Gates", "string", 1, lambda p: "<none>")],
    ("", "namespaces"): [("Status", "string", 0, _get(".status.phase")), AGE],
    ("", "nodes"): [
        ("Status", "string", 0, lambda n: next((("Ready" if c.get("status") == "True" else "NotReady")
                                                for c in (n.get("status") or {}).get("conditions") or []
                                                if c.get("type") == "Ready"), "Unknown")
                                          + (",SchedulingDisabled" if (n.get("spec") or {}).get("unschedulable") else "")),
        ("Roles", "string", 0, lambda n: _join(sorted(k.split("/", 1)[1] for k in (n["metadata"].get("labels") or {})
                                                      if k.startswith("node-role.kubernetes.io/")))),
        AGE, ("Version", "string", 0, _or_none(_get(".status.nodeInfo.kubeletVersion")))],
    ("", "configmaps"): [("Data", "integer", 0, lambda o: len(o.get("data") or {}) + len(o.get("binaryData") or {})),
                         AGE],
    ("", "secrets"): [("Type", "string", 0, _get(".type")), ("Data", "integer", 0, lambda o: len(o.get("data") or {})),
                      AGE],
    ("", "serviceaccounts"): [("Secrets", "integer", 0, lambda o: len(o.get("secrets") or [])), AGE],
    ("", "services"): [
        ("Type", "string", 0, lambda s: (s.get("spec") or {}).get("type", "ClusterIP")),
        ("Cluster-IP", "string", 0, _or_none(_get(".spec.clusterIP"))),
        ("External-IP", "string", 0, lambda s: "<none>"), ("Port(s)", "string", 0, _service_ports), AGE,
        ("Selector", "string", 1, lambda s: _join(f"{k}={v}" for k, v in ((s.get("spec") or {}).get("selector") or {}).items()))],
    ("", "persistentvolumeclaims"): [
        ("Status", "string", 0, _get(".status.phase")), ("Volume", "string", 0, _get(".spec.volumeName")),
        ("Capacity", "string", 0, _get(".status.capacity.storage")),
        ("Access Modes", "string", 0, lambda o: _access_modes(o, "status")),
        ("StorageClass", "string", 0, _or_none(_get(".spec.storageClassName"))),
        ("VolumeAttributesClass", "string", 0, _or_none(_get(".spec.volumeAttributesClassName"))), AGE,
        ("VolumeMode", "string", 1, _get(".spec.volumeMode"))],
    ("", "persistentvolumes"): [
        ("Capacity", "string", 0, _get(".spec.capacity.storage")),
        ("Access Modes", "string", 0, lambda o: _access_modes(o, "spec")),
        ("Reclaim Policy", "string", 0, _get(".spec.persistentVolumeReclaimPolicy")),
        ("Status", "string", 0, _get(".status.phase")),
        ("Claim", "string", 0, lambda o: "/".join(filter(None, [_get(".spec.claimRef.namespace")(o),
                                                                 _get(".spec.claimRef.name")(o)]))),
        ("StorageClass", "string", 0, _get(".spec.storageClassName")),
        ("VolumeAttributesClass", "string", 0, _or_none(_get(".spec.volumeAttributesClassName"))),
        ("Reason", "string", 0, _get(".status.reason")), AGE,
        ("VolumeMode", "string", 1, _get(".spec.volumeMode"))],
    ("", "resourcequotas"): [AGE, ("Request", "string", 0, lambda q: _quota_usage(q, limits=False)),
                             ("Limit", "string", 0, lambda q: _quota_usage(q, limits=True))],
    ("apps", "deployments"): [
        ("Ready", "string", 0, lambda d: f"{(d.get('status') or {}).get('readyReplicas', 0)}/"
                                         f"{(d.get('spec') or {}).get('replicas', 1)}"),
        ("Up-to-date", "integer", 0, lambda d: (d.get("status") or {}).get("updatedReplicas", 0)),
        ("Available", "integer", 0, lambda d: (d.get("status") or {}).get("availableReplicas", 0)), AGE,
        ("Containers", "string", 1, lambda d: _join(c.get("name") for c in jsonpath(d, ".spec.template.spec.containers[*]"))),
        ("Images", "string", 1, lambda d: _join(c.get("image") for c in jsonpath(d, ".spec.template.spec.containers[*]"))),
        ("Selector", "string", 1, lambda d: _join(f"{k}={v}" for k, v in
                                                  ((_get(".spec.selector.matchLabels")(d)) or {}).items()))],
    ("apps", "daemonsets"): [
        ("Desired", "integer", 0, _get(".status.desiredNumberScheduled")),
        ("Current", "integer", 0, _get(".status.currentNumberScheduled")),
        ("Ready", "integer", 0, _get(".status.numberReady")), AGE],
    ("batch", "jobs"): [
        ("Status", "string", 0, lambda j: "Complete" if (j.get("status") or {}).get("succeeded") else "Running"),
        ("Completions", "string", 0, lambda j: f"{(j.get('status') or {}).get('succeeded', 0)}/"
                                               f"{(j.get('spec') or {}).get('completions', 1)}"), AGE],
    ("apiextensions.k8s.io", "customresourcedefinitions"): [
        ("Created At", "date", 0, lambda o: o["metadata"].get("creationTimestamp"))],
    ("coordination.k8s.io", "leases"): [("Holder", "string", 0, _get(".spec.holderIdentity")), AGE],
    ("node.k8s.io", "runtimeclasses"): [("Handler", "string", 0, _get(".handler")), AGE],
    ("", "events"): [("Type", "string", 0, _get(".type")), ("Reason", "string", 0, _get(".reason")),
                     ("Object", "string", 0, lambda e: f"{_get('.involvedObject.kind')(e) or ''}/".lower()
                      + (_get(".involvedObject.name")(e) or "")),
                     ("Message", "string", 0, _get(".message"))],
}


def _columns(rt: Any, crd: dict[str, Any] | None, version: str) -> list[tuple[dict[str, Any], Callable[[Any], Any]]]:
    out: list[tuple[dict[str, Any], Callable[[Any], Any]]] = [(dict(NAME_COLUMN), lambda o: o["metadata"]["name"])]
    if rt.custom:
        spec_versions = ((crd or {}).get("spec") or {}).get("versions") or []
        declared = next((v.get("additionalPrinterColumns") for v in spec_versions if v.get("name") == version), None)
        if not declared:
            declared = [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]
        for col in declared:
            ctype = col.get("type", "string")
            definition = {"name": col["name"], "type": ctype,
                          "format": col.get("format", ""), "description": col.get("description", ""),
                          "priority": int(col.get("priority", 0))}
            path = col["jsonPath"]
            out.append((definition, lambda o, path=path, ctype=ctype: _cell(jsonpath(o, path), ctype)))
        return out
    for name, ctype, priority, fn in BUILTIN_COLUMNS.get(rt.key, [AGE]):
        definition = {"name": name, "type": "string" if ctype == "date" else ctype, "format": "",
                      "description": "", "priority": priority}
        if ctype == "date":
            out.append((definition, lambda o, fn=fn: age(fn(o))))
        else:
            out.append((definition, fn))
    return out


def check_include_object(value: str | None) -> str:
    include = value or "Metadata"
    if include not in ("None", "Metadata", "Object"):
        raise errors.BadRequest(
            f'includeObject: Unsupported value: "{include}": supported values: "Metadata", "None", "Object"')
    return include


def table(rt: Any, objects: list[dict[str, Any]], *, crd: dict[str, Any] | None, version: str,
          list_meta: dict[str, Any], include_object: str | None) -> dict[str, Any]:
    """A ``meta.k8s.io/v1`` Table of ``objects`` (already rendered in ``version``)."""
    include = check_include_object(include_object)
    columns = _columns(rt, crd, version)
    rows = []
    for obj in objects:
        cells = []
        for _, fn in columns:
            try:
                cells.append(fn(obj))
            except (KeyError, TypeError, ValueError, IndexError, AttributeError):
                cells.append(None)
        row: dict[str, Any] = {"cells": cells}
        if include == "Object":
            row["object"] = obj
        elif include == "Metadata":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": obj.get("metadata", {})}
        rows.append(row)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta,
            "columnDefinitions": [c for c, _ in columns], "rows": rows}
