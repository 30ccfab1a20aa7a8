"""The patch kinds the API accepts: JSON patch, JSON merge patch, strategic merge patch.

Strategic merge patch is done the way the API server does for the fields the project
touches: lists of objects are merged by their patch merge key (``containers`` by
``name``, ``conditions`` by ``type``, ``ownerReferences`` by ``uid``, ...), lists of
strings with a merge strategy (``finalizers``) are unions, other lists are replaced;
``$patch: delete|replace``, ``$deleteFromPrimitiveList/<field>`` and
``$setElementOrder/<field>`` (ignored) directives are honoured. Server-side apply
(``application/apply-patch+yaml``) is emulated as a merge of the applied
configuration (see the README's simplifications).
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from gpucaas.devtools.kube_emulator.errors import BadRequest, Invalid, field_error

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH)

# field name -> merge key, for lists of objects merged (not replaced) by strategic merge.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "env": "name",
    "ports": "containerPort",
    "conditions": "type",
    "ownerReferences": "uid",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "addresses": "type",
    "taints": "key",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
}
# lists of scalars merged as sets by strategic merge.
MERGE_PRIMITIVE_LISTS = {"finalizers"}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(target: dict[str, Any], ops: Any, kind: str, name: str) -> dict[str, Any]:
    if not isinstance(ops, list):
        raise BadRequest("json patch must be a list of operations")
    try:
        return jsonpatch.apply_patch(target, ops, in_place=False)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
        raise Invalid(kind, name, [field_error("", "FieldValueInvalid", f"the json patch failed: {exc}")]) from exc


def strategic_merge_patch(target: Any, patch: Any, field: str = "") -> Any:
    """Strategic merge of ``patch`` into ``target`` (a copy is returned)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key.startswith("$retainKeys") or key == "$patch":
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            fname = key.split("/", 1)[1]
            if isinstance(result.get(fname), list):
                result[fname] = [x for x in result[fname] if x not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list):
            result[key] = _merge_list(result.get(key), value, key)
        elif isinstance(value, dict):
            merged = strategic_merge_patch(result.get(key), value, key)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        else:
            result[key] = value
    return result


def _merge_list(current: Any, patch: list[Any], field: str) -> list[Any]:
    current = current if isinstance(current, list) else []
    if field in MERGE_PRIMITIVE_LISTS:
        out = list(current)
        for item in patch:
            if item not in out:
                out.append(item)
        return out
    merge_key = MERGE_KEYS.get(field)
    if not merge_key or not all(isinstance(x, dict) for x in patch):
        return [x for x in copy.deepcopy(patch) if not (isinstance(x, dict) and x.get("$patch"))]
    if any(x.get("$patch") == "replace" for x in patch):
        return [copy.deepcopy(x) for x in patch if x.get("$patch") != "replace"]
    out = copy.deepcopy(current)
    for item in patch:
        key = item.get(merge_key)
        idx = next((i for i, x in enumerate(out) if isinstance(x, dict) and x.get(merge_key) == key), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            out.append(strategic_merge_patch({}, item, field))
        else:
            out[idx] = strategic_merge_patch(out[idx], item, field)
    return out


def apply(target: dict[str, Any], patch_type: str, patch: Any, *, custom: bool, kind: str, name: str) -> dict[str, Any]:
    """Apply ``patch`` of ``patch_type`` (a content type) to ``target``."""
    if patch_type == JSON_PATCH:
        return json_patch(target, patch, kind, name)
    if not isinstance(patch, dict):
        raise BadRequest(f"the patch body must be a JSON object for {patch_type}")
    if patch_type == MERGE_PATCH:
        return merge_patch(target, patch)
    if patch_type == STRATEGIC_MERGE_PATCH:
        return strategic_merge_patch(target, patch)
    if patch_type == APPLY_PATCH:
        return strategic_merge_patch(target, patch) if not custom else merge_patch(target, patch)
    raise BadRequest(f"unknown patch type {patch_type}")
