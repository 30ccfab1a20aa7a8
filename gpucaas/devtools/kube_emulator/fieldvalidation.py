"""Unknown and duplicate fields, and the ``fieldValidation`` query parameter.

A real API server decodes a built-in object into its Go type, which drops fields the
type does not have; a custom resource is pruned against its structural schema. With
``fieldValidation=Strict`` the request fails instead (400 BadRequest,
``<Kind> in version "<v>" cannot be handled as a <Kind>: strict decoding error: unknown
field "spec.foo"``), with ``Warn`` (the default since 1.27) every dropped field comes
back as a ``Warning`` header (``unknown field "spec.foo"``), with ``Ignore`` they are
dropped silently (KEP-2885 server-side unknown field validation). Duplicate JSON keys are
reported the same way (``duplicate field "replicas"``).

Built-in kinds are walked against the schemas of :mod:`.openapi` (the
``kubernetes-validate`` package); custom resources against their CRD's
``openAPIV3Schema`` (``x-kubernetes-preserve-unknown-fields`` and
``x-kubernetes-embedded-resource`` honoured), with ``metadata`` as ``ObjectMeta``.
"""

from __future__ import annotations

import json
from typing import Any

from gpucaas.devtools.kube_emulator import errors, openapi, request_context

OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _walk_builtin(value: Any, schema: dict[str, Any] | None, path: str, found: list[str], drop: bool) -> None:
    schema = openapi.resolve(schema)
    if schema is None:
        return
    for sub in schema.get("allOf") or []:
        _walk_builtin(value, sub, path, found, drop)
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key in list(value):
            if props is not None and key in props:
                _walk_builtin(value[key], props[key], _join(path, key), found, drop)
            elif isinstance(extra, dict):
                _walk_builtin(value[key], extra, _join(path, key), found, drop)
            elif props is not None and extra is not True:
                found.append(_join(path, key))
                if drop:
                    del value[key]
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _walk_builtin(item, schema["items"], _join(path, i), found, drop)


def _walk_crd(value: Any, schema: dict[str, Any], path: str, found: list[str], drop: bool) -> None:
    if schema.get("x-kubernetes-preserve-unknown-fields") and "properties" not in schema:
        return
    if isinstance(value, dict):
        if schema.get("x-kubernetes-embedded-resource"):
            for key in ("apiVersion", "kind", "metadata"):
                if key in value and key not in (schema.get("properties") or {}):
                    if key == "metadata":
                        _walk_builtin(value[key], {"$ref": "#/$defs/" + OBJECT_META}, _join(path, key), found, drop)
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key in list(value):
            if key in props:
                _walk_crd(value[key], props[key], _join(path, key), found, drop)
            elif isinstance(extra, dict):
                _walk_crd(value[key], extra, _join(path, key), found, drop)
            elif extra is True or schema.get("x-kubernetes-preserve-unknown-fields"):
                continue
            elif schema.get("x-kubernetes-embedded-resource") and key in ("apiVersion", "kind", "metadata"):
                continue
            else:
                found.append(_join(path, key))
                if drop:
                    del value[key]
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _walk_crd(item, schema["items"], _join(path, i), found, drop)


def unknown_fields(rt: Any, obj: dict[str, Any], version: str, *, drop: bool) -> list[str]:
    """Paths of ``obj``'s fields its type does not declare (removed when ``drop``)."""
    found: list[str] = []
    if rt.custom:
        schema = rt.schemas.get(version)
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            _walk_builtin(meta, {"$ref": "#/$defs/" + OBJECT_META}, "metadata", found, drop)
        if schema is not None:
            body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
            _walk_crd(body, schema, "", found, drop)
            if drop:
                for k in [k for k in obj if k not in ("apiVersion", "kind", "metadata") and k not in body]:
                    del obj[k]
        return found
    name = openapi.definition_for(rt.group, version, rt.kind)
    if name is None:
        return found
    _walk_builtin(obj, {"$ref": "#/$defs/" + name}, "", found, drop)
    return found


def enforce(rt: Any, obj: dict[str, Any], version: str) -> None:
    """Apply the request's ``fieldValidation`` to ``obj`` (pruned in place unless Strict fails)."""
    ctx = request_context.current()
    problems = [f'unknown field "{p}"' for p in unknown_fields(rt, obj, version, drop=True)]
    if ctx is None:
        return
    problems = [f'duplicate field "{d}"' for d in ctx.duplicates] + problems
    if not problems or ctx.field_validation == "Ignore":
        return
    if ctx.field_validation == "Strict":
        raise errors.BadRequest(
            f'{rt.kind} in version "{version}" cannot be handled as a {rt.kind}: strict decoding error: '
            + ", ".join(problems))
    for text in problems:
        ctx.warn(text)


_JSON_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "integer": int, "number": (int, float)}


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _type_errors(value: Any, schema: dict[str, Any] | None, path: str, found: list[str]) -> None:
    schema = openapi.resolve(schema)
    if schema is None or value is None or "oneOf" in schema:  # Quantity, IntOrString: strings or numbers
        return
    types = schema.get("type")
    types = [t for t in (types if isinstance(types, list) else [types]) if t and t != "null"]
    if types and not any(isinstance(value, _JSON_TYPES.get(t, object)) and not (
            t in ("integer", "number") and isinstance(value, bool)) for t in types):
        found.append(f"json: cannot unmarshal {_json_type(value)} into Go struct field {path} of type {types[0]}")
        return
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, sub in value.items():
            child = props.get(key) if key in props else (extra if isinstance(extra, dict) else None)
            _type_errors(sub, child, f"{path}.{key}", found)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _type_errors(item, schema["items"], path, found)


def check_types(rt: Any, obj: dict[str, Any], version: str) -> None:
    """400 for a built-in object whose JSON types do not fit its Go type, as the decoder refuses it."""
    if rt.custom:
        return
    name = openapi.definition_for(rt.group, version, rt.kind)
    if name is None:
        return
    found: list[str] = []
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    _type_errors(body, {"$ref": "#/$defs/" + name}, rt.kind, found)
    if found:
        raise errors.BadRequest(f'{rt.kind} in version "{version}" cannot be handled as a {rt.kind}: {found[0]}')


def loads_checking_duplicates(raw: bytes | str) -> Any:
    """``json.loads`` that records duplicate keys in the request context (last one wins, as in Go)."""
    ctx = request_context.current()

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out and ctx is not None and key not in ctx.duplicates:
                ctx.duplicates.append(key)
            out[key] = value
        return out

    return json.loads(raw, object_pairs_hook=pairs)
