"""Server-side apply and ``metadata.managedFields``: a simplified but faithful model.

Modelled on k8s.io/apimachinery/pkg/util/managedfields (the field manager) and
sigs.k8s.io/structured-merge-diff (``fieldpath`` sets, ``merge.Updater``):

- A field set is a set of paths; a path element is ``f:<field>``, ``k:<json of the key
  fields>`` (an item of an associative list), ``v:<json value>`` (an item of a set list).
  ``FieldsV1`` is the nested JSON form of that set (``{"f:spec": {"f:replicas": {}}}``,
  ``"."`` marking a list item that is itself a member), as on a real server.
- List and map semantics come from the schema: ``x-kubernetes-list-type``
  (``map``/``set``/``atomic``), ``x-kubernetes-list-map-keys``, ``x-kubernetes-map-type``;
  built-in lists without a list type but with a patch merge key are maps, others atomic
  (the built-in schemas come from :mod:`.openapi`, custom ones from the CRD).
- ``apiVersion``, ``kind`` and the server-set metadata (name, namespace, uid,
  resourceVersion, generation, creationTimestamp, managedFields, ...) are never owned
  (SMD's strip set); with a ``status`` subresource the main resource owns no ``status``
  field and ``/status`` owns only ``status`` (reset fields).
- **Update** (create, PUT, non-apply PATCH): the manager (``fieldManager``, else the
  User-Agent's prefix) takes every field it added or changed, which every other manager
  loses; fields that disappear leave every set.
- **Apply** (``PATCH`` with ``application/apply-patch+yaml``, ``fieldManager`` required):
  a field of the applied configuration owned by another manager whose live value differs
  is a conflict (409, ``Apply failed with N conflict(s): ...``, one
  ``FieldManagerConflict`` cause per field, as ``NewConflictError`` in
  managedfields/internal/conflict.go words it) unless ``force=true``, which takes it over;
  equal values are shared. The applied configuration is merged into the live object
  (maps and associative lists merged, sets unioned, atomic values replaced); fields the
  manager applied before and no longer applies are removed unless another manager owns
  them. The manager's ``Apply`` entry becomes exactly the applied set.

Simplified (docs/kube-emulator.md): no per-version conversion of field sets, no
``managedFields`` reset via an empty list in a request, defaulted fields are not owned,
atomic lists and ``x-kubernetes-map-type: atomic`` are compared as whole values.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

from gpucaas.devtools.kube_emulator import errors, openapi, request_context

Path = tuple[str, ...]
_STRIP_META = ("name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp", "managedFields",
               "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---- schemas ---------------------------------------------------------------------------

def _resolve(schema: Any) -> dict[str, Any]:
    if not isinstance(schema, dict):
        return {}
    if "$ref" in schema:
        return _resolve(openapi.resolve({"$ref": schema["$ref"]}))
    if "allOf" in schema and "properties" not in schema:
        for sub in schema["allOf"]:
            got = _resolve(sub)
            if got:
                return {**got, **{k: v for k, v in schema.items() if k != "allOf"}}
    return schema


def root_schema(rt: Any, version: str) -> dict[str, Any]:
    if rt.custom:
        schema = copy.copy(rt.schemas.get(version) or {"type": "object", "x-kubernetes-preserve-unknown-fields": True})
        props = dict(schema.get("properties") or {})
        props["metadata"] = {"$ref": "#/$defs/" + "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
        schema["properties"] = props
        return schema
    name = openapi.definition_for(rt.group, version, rt.kind)
    return {"$ref": "#/$defs/" + name} if name else {}


def _child(schema: dict[str, Any], key: str) -> dict[str, Any]:
    schema = _resolve(schema)
    props = schema.get("properties") or {}
    if key in props:
        return _resolve(props[key])
    extra = schema.get("additionalProperties")
    return _resolve(extra) if isinstance(extra, dict) else {}


def _items(schema: dict[str, Any]) -> dict[str, Any]:
    return _resolve(_resolve(schema).get("items"))


def _list_type(schema: dict[str, Any]) -> tuple[str, list[str]]:
    schema = _resolve(schema)
    kind = schema.get("x-kubernetes-list-type")
    keys = list(schema.get("x-kubernetes-list-map-keys") or [])
    if kind is None and schema.get("x-kubernetes-patch-merge-key"):
        kind, keys = "map", [schema["x-kubernetes-patch-merge-key"]]
    if kind == "map" and keys:
        return "map", keys
    if kind == "set":
        return "set", []
    return "atomic", []


def _atomic_map(schema: dict[str, Any]) -> bool:
    schema = _resolve(schema)
    return schema.get("x-kubernetes-map-type") == "atomic" or schema.get("x-kubernetes-int-or-string") is True


def _key_of(item: dict[str, Any], keys: list[str]) -> str:
    return json.dumps({k: item[k] for k in keys if k in item}, separators=(",", ":"))


# ---- field sets ------------------------------------------------------------------------

def fieldset(obj: dict[str, Any], schema: dict[str, Any], *, part: str = "main") -> set[Path]:
    """The set of (leaf) fields ``obj`` sets; ``part``: ``main`` (no status), ``status``, ``all``."""
    out: set[Path] = set()
    for key, value in obj.items():
        if key in ("apiVersion", "kind"):
            continue
        if part == "main" and key == "status":
            continue
        if part == "status" and key != "status":
            continue
        if key == "metadata" and isinstance(value, dict):
            meta = {k: v for k, v in value.items() if k not in _STRIP_META}
            _collect(meta, _child(schema, "metadata"), ("f:metadata",), out, top=True)
            continue
        _collect(value, _child(schema, key), (f"f:{key}",), out)
    return out


def _collect(value: Any, schema: dict[str, Any], path: Path, out: set[Path], top: bool = False) -> None:
    if isinstance(value, dict) and not _atomic_map(schema):
        if not value:
            if not top:
                out.add(path)
            return
        for k, v in value.items():
            _collect(v, _child(schema, k), (*path, f"f:{k}"), out)
        return
    if isinstance(value, list) and value:
        kind, keys = _list_type(schema)
        if kind == "map" and all(isinstance(i, dict) for i in value):
            for item in value:
                ipath = (*path, "k:" + _key_of(item, keys))
                out.add(ipath)
                for k, v in item.items():
                    _collect(v, _child(_items(schema), k), (*ipath, f"f:{k}"), out)
            return
        if kind == "set":
            for item in value:
                out.add((*path, "v:" + json.dumps(item, separators=(",", ":"))))
            return
    out.add(path)


def _is_item(path: Path) -> bool:
    return bool(path) and path[-1][:2] in ("k:", "v:")


def lookup(obj: Any, path: Path) -> tuple[bool, Any]:
    """The value at ``path`` in ``obj`` (found, value)."""
    cur = obj
    for el in path:
        kind, _, arg = el.partition(":")
        if kind == "f":
            if not isinstance(cur, dict) or arg not in cur:
                return False, None
            cur = cur[arg]
        elif kind == "k":
            want = json.loads(arg)
            match = [i for i in cur or [] if isinstance(i, dict) and all(i.get(k) == v for k, v in want.items())] \
                if isinstance(cur, list) else []
            if not match:
                return False, None
            cur = match[0]
        elif kind == "v":
            want = json.loads(arg)
            if not isinstance(cur, list) or want not in cur:
                return False, None
            cur = want
        else:
            return False, None
    return True, cur


def remove(obj: Any, path: Path) -> None:
    """Delete the field (or list item) at ``path`` from ``obj`` if it is there."""
    if not path:
        return
    found, parent = lookup(obj, path[:-1])
    if not found:
        return
    kind, _, arg = path[-1].partition(":")
    if kind == "f" and isinstance(parent, dict):
        parent.pop(arg, None)
    elif kind == "k" and isinstance(parent, list):
        want = json.loads(arg)
        parent[:] = [i for i in parent if not (isinstance(i, dict) and all(i.get(k) == v for k, v in want.items()))]
    elif kind == "v" and isinstance(parent, list):
        want = json.loads(arg)
        parent[:] = [i for i in parent if i != want]


def to_fields_v1(paths: set[Path]) -> dict[str, Any]:
    """The ``FieldsV1`` JSON of a set of paths."""
    root: dict[str, Any] = {}
    for path in sorted(paths):
        node = root
        for el in path:
            node = node.setdefault(el, {})
    for path in paths:  # a member that also has members below it is marked with "."
        node = root
        for el in path:
            node = node[el]
        if node and "." not in node:
            node["."] = {}
    return root


def _valid_element(key: Any) -> bool:
    if not isinstance(key, str) or key[:2] not in ("f:", "k:", "v:"):
        return False
    if key[:2] == "f:":
        return True
    try:
        parsed = json.loads(key[2:])
    except ValueError:
        return False
    return isinstance(parsed, dict) if key[:2] == "k:" else True


def from_fields_v1(tree: Any, prefix: Path = ()) -> set[Path]:
    """The set of a ``FieldsV1`` tree; elements that are not ``f:``/``k:``/``v:`` are skipped."""
    out: set[Path] = set()
    if not isinstance(tree, dict):
        return out
    if prefix and (not tree or "." in tree):
        out.add(prefix)
    for key, sub in tree.items():
        if key != "." and _valid_element(key):
            out |= from_fields_v1(sub, (*prefix, key))
    return out


def path_string(path: Path) -> str:
    """fieldpath.Path's String(): ``.spec.containers[name="a"].image``, ``.metadata.finalizers[="x"]``."""
    out = ""
    for el in path:
        kind, _, arg = el.partition(":")
        if kind == "f":
            out += "." + arg
        elif kind == "k":
            out += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in json.loads(arg).items()) + "]"
        elif kind == "v":
            out += f"[={arg}]"
    return out


# ---- managedFields entries -------------------------------------------------------------

def _entries(obj: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for e in (obj.get("metadata") or {}).get("managedFields") or []:
        if isinstance(e, dict) and e.get("manager") is not None:
            e = dict(e)
            e["_set"] = from_fields_v1(e.get("fieldsV1") or {})
            out.append(e)
    return out


def _store_entries(obj: dict[str, Any], entries: list[dict[str, Any]]) -> None:
    out = []
    for e in entries:
        if not e["_set"]:
            continue
        entry = {k: v for k, v in e.items() if k != "_set"}
        entry["fieldsType"] = "FieldsV1"
        entry["fieldsV1"] = to_fields_v1(e["_set"])
        out.append(entry)
    meta = obj.setdefault("metadata", {})
    if out:
        meta["managedFields"] = out
    else:
        meta.pop("managedFields", None)


def _same_manager(e: dict[str, Any], manager: str, operation: str, api_version: str, sub: str | None) -> bool:
    return (e.get("manager") == manager and e.get("operation") == operation
            and e.get("subresource", "") == (sub or "")
            and (operation == "Apply" or e.get("apiVersion") == api_version))


def _describe(e: dict[str, Any]) -> str:
    """``printManager`` of managedfields/internal/conflict.go."""
    text = json.dumps(e.get("manager"))
    if e.get("subresource"):
        text += f" with subresource {json.dumps(e['subresource'])}"
    if e.get("operation") == "Update":
        text += f" using {e.get('apiVersion')}"
        if e.get("time"):
            text += f" at {e['time']}"
    return text


def _part(rt: Any, subresource: str | None) -> str:
    if subresource == "status":
        return "status"
    return "main" if rt.has_status else "all"


def track_update(rt: Any, old: dict[str, Any] | None, new: dict[str, Any], *, version: str,
                 subresource: str | None) -> None:
    """Record a non-apply write of ``new`` (replacing ``old``, None on create) in its managedFields."""
    ctx = request_context.current()
    if old is not None and not (new.get("metadata") or {}).get("managedFields"):
        new.setdefault("metadata", {})["managedFields"] = copy.deepcopy((old.get("metadata") or {}).get("managedFields"))
        if new["metadata"]["managedFields"] is None:
            del new["metadata"]["managedFields"]
    if ctx is None or ctx.applying:
        return
    schema = root_schema(rt, version)
    part = _part(rt, subresource)
    old_set = fieldset(old, schema, part=part) if old is not None else set()
    new_set = fieldset(new, schema, part=part)
    changed = {p for p in new_set if p not in old_set
               or (not _is_item(p) and lookup(old, p)[1] != lookup(new, p)[1])}
    removed = old_set - new_set
    if not changed and not removed:
        return
    entries = _entries(new) if old is not None else []
    manager = ctx.manager()
    api_version = new.get("apiVersion", rt.api_version(version))
    mine = next((e for e in entries if _same_manager(e, manager, "Update", api_version, subresource)), None)
    for e in entries:
        e["_set"] = e["_set"] - changed - removed
    if mine is None:
        mine = {"manager": manager, "operation": "Update", "apiVersion": api_version, "_set": set()}
        if subresource:
            mine["subresource"] = subresource
        entries.append(mine)
    if changed:
        mine["_set"] = mine["_set"] | changed
        mine["time"] = _now()
    _store_entries(new, entries)


def apply(rt: Any, live: dict[str, Any] | None, applied: Any, *, version: str, subresource: str | None,
          name: str) -> dict[str, Any]:
    """The object after server-side applying ``applied`` (raises 409 Conflict / 422 Invalid)."""
    ctx = request_context.current()
    manager = ctx.field_manager if ctx is not None else None
    if not manager:
        raise errors.Invalid("PatchOptions", "", [errors.field_error(
            "fieldManager", "FieldValueRequired", "Required value: is required for apply patch")], "meta.k8s.io")
    if not isinstance(applied, dict):
        raise errors.BadRequest("the apply configuration must be a YAML or JSON object")
    for field in ("apiVersion", "kind"):
        if not applied.get(field):
            raise errors.BadRequest(f"invalid object type: {field} must be set in an apply configuration")
    if not isinstance(applied.get("metadata", {}), dict):
        raise errors.BadRequest("metadata must be an object in an apply configuration")
    applied = copy.deepcopy(applied)
    (applied.get("metadata") or {}).pop("managedFields", None)
    schema = root_schema(rt, version)
    part = _part(rt, subresource)
    applied_set = fieldset(applied, schema, part=part)
    base = copy.deepcopy(live) if live is not None else {}
    entries = _entries(base)
    api_version = applied.get("apiVersion") or rt.api_version(version)
    mine = next((e for e in entries if _same_manager(e, manager, "Apply", api_version, subresource)), None)
    conflicts: list[tuple[dict[str, Any], Path]] = []
    for e in entries:
        if e is mine:
            continue
        for p in sorted(applied_set & e["_set"]):
            if _is_item(p):
                continue
            if lookup(base, p)[1] != lookup(applied, p)[1]:
                conflicts.append((e, p))
    if conflicts and not (ctx is not None and ctx.force):
        raise conflict_error(rt, name, conflicts)
    for e, p in conflicts:
        e["_set"] = e["_set"] - {p}
    merged = merge(base, applied if part != "main" else {k: v for k, v in applied.items() if k != "status"}, schema)
    if part == "status":
        merged = copy.deepcopy(base) if live is not None else merged
        merged["status"] = merge(base.get("status"), applied.get("status"), _child(schema, "status"))
    previous = mine["_set"] if mine is not None else set()
    others = set().union(*(e["_set"] for e in entries if e is not mine)) if entries else set()
    for p in sorted(previous - applied_set - others, key=len, reverse=True):
        remove(merged, p)
    if mine is None:
        mine = {"manager": manager, "operation": "Apply", "apiVersion": api_version}
        if subresource:
            mine["subresource"] = subresource
        entries.append(mine)
    mine["apiVersion"] = api_version
    mine["_set"] = applied_set
    mine["time"] = _now()
    _store_entries(merged, entries)
    return merged


def merge(live: Any, applied: Any, schema: dict[str, Any]) -> Any:
    """Merge an applied configuration into the live value, schema-aware (see module doc)."""
    if isinstance(applied, dict) and isinstance(live, dict) and not _atomic_map(schema):
        out = copy.deepcopy(live)
        for k, v in applied.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = merge(live.get(k), v, _child(schema, k))
        return out
    if isinstance(applied, list) and isinstance(live, list):
        kind, keys = _list_type(schema)
        if kind == "map" and all(isinstance(i, dict) for i in applied + live):
            out = copy.deepcopy(live)
            for item in applied:
                key = _key_of(item, keys)
                idx = next((i for i, x in enumerate(out) if _key_of(x, keys) == key), None)
                if idx is None:
                    out.append(copy.deepcopy(item))
                else:
                    out[idx] = merge(out[idx], item, _items(schema))
            return out
        if kind == "set":
            return list(live) + [i for i in applied if i not in live]
    return copy.deepcopy(applied)


def conflict_error(rt: Any, name: str, conflicts: list[tuple[dict[str, Any], Path]]) -> errors.Conflict:
    causes = [{"reason": "FieldManagerConflict", "message": f"conflict with {_describe(e)}", "field": path_string(p)}
              for e, p in conflicts]
    if len(conflicts) == 1:
        e, p = conflicts[0]
        message = f"Apply failed with 1 conflict: conflict with {_describe(e)}: {path_string(p)}"
    else:
        by_manager: dict[str, list[str]] = {}
        for e, p in conflicts:
            by_manager.setdefault(_describe(e), []).append(path_string(p))
        lines = []
        for manager in sorted(by_manager):
            lines.append(f"conflicts with {manager}:")
            lines.extend(f"- {p}" for p in by_manager[manager])
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return errors.Conflict(message, details={"causes": causes})
