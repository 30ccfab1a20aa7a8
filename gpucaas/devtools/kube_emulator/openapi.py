"""``/openapi/v2`` and ``/openapi/v3`` for the built-in kinds and every CRD.

Built-in schemas are not written here: they come, at run time, from the JSON schemas
of the Kubernetes API that the ``kubernetes-validate`` package ships per Kubernetes
release (``kubernetes_validate/kubernetes-json-schema/v1.NN.0-local/_definitions.json``,
generated from the upstream OpenAPI document, with the ``x-kubernetes-*`` extensions
kept). They are turned back into OpenAPI: JSON-schema ``type: [T, "null"]`` becomes
``type: T``, ``#/$defs/`` references become ``#/definitions/`` (v2) or
``#/components/schemas/`` (v3, wrapped in ``allOf`` as the real server does when a
reference has siblings). Custom resources get the CRD version's ``openAPIV3Schema``
under the name the apiextensions server gives them (``dev.gpucaas.v1alpha1.Tenancy``:
reversed group, version, kind), with ``apiVersion``/``kind``/``metadata`` added.

The v3 index (``/openapi/v3``) lists one document per served group-version
(``api/v1``, ``apis/apps/v1``, ``apis/gpucaas.dev/v1alpha1``) with a content hash in
``serverRelativeURL``, as kube-openapi's ``handler3`` does. Each document has paths for
the resources of that group-version whose operations carry
``x-kubernetes-group-version-kind`` and, on POST/PUT/PATCH, the ``fieldValidation``
query parameter: kubectl's ``QueryParamVerifierV3``
(k8s.io/cli-runtime/pkg/resource/query_param_verifier_v3.go) looks for exactly that on
the PATCH operation before it relies on server-side validation, so
``kubectl apply`` validates without ``--validate=false``.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import re
from importlib import resources
from typing import Any

from gpucaas.devtools.kube_emulator.resources import Registry, ResourceType

KUBERNETES_MINOR = 31  # the release the emulator reports in /version
_REF = "#/$defs/"


@functools.lru_cache(maxsize=1)
def builtin_definitions() -> dict[str, dict[str, Any]]:
    """The JSON-schema definitions of the Kubernetes API (closest release <= the emulator's)."""
    root = resources.files("kubernetes_validate") / "kubernetes-json-schema"
    versions = []
    for entry in root.iterdir():
        m = re.fullmatch(r"v1\.(\d+)\.0-local", entry.name)
        if m:
            versions.append(int(m.group(1)))
    usable = [v for v in versions if v <= KUBERNETES_MINOR] or versions
    chosen = max(usable)
    doc = json.loads((root / f"v1.{chosen}.0-local" / "_definitions.json").read_text())
    return doc["$defs"]


def definition_for(group: str, version: str, kind: str) -> str | None:
    """The definition name of a built-in kind (by its ``x-kubernetes-group-version-kind``)."""
    return _gvk_index().get((group, version, kind))


@functools.lru_cache(maxsize=1)
def _gvk_index() -> dict[tuple[str, str, str], str]:
    out: dict[tuple[str, str, str], str] = {}
    for name, schema in builtin_definitions().items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            out.setdefault((gvk.get("group", ""), gvk["version"], gvk["kind"]), name)
    return out


def resolve(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """Follow a ``$ref`` of the built-in definitions (one level)."""
    while schema is not None and "$ref" in schema:
        schema = builtin_definitions().get(schema["$ref"][len(_REF):])
    return schema


def crd_definition_name(group: str, version: str, kind: str) -> str:
    """``dev.gpucaas.v1alpha1.Tenancy``: how the apiextensions server names a CRD's schema."""
    return ".".join([*reversed(group.split(".")), version, kind])


# ---- conversion of JSON schema back to OpenAPI ---------------------------------------

def _to_openapi(schema: Any, prefix: str, v3: bool) -> Any:
    if isinstance(schema, list):
        return [_to_openapi(s, prefix, v3) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("$schema", "$id"):
            continue
        if key == "type" and isinstance(value, list):
            types = [t for t in value if t != "null"]
            out["type"] = types[0] if len(types) == 1 else types
        elif key == "$ref":
            out["$ref"] = prefix + value[len(_REF):]
        elif key in ("properties", "patternProperties", "definitions"):
            out[key] = {k: _to_openapi(v, prefix, v3) for k, v in value.items()}
        elif key == "oneOf" and not v3:
            # v2 has no oneOf: Quantity and IntOrString are ``type: string`` with a format.
            out["type"] = "string"
            out["format"] = "int-or-string" if any("integer" in json.dumps(o) for o in value) else ""
            if not out["format"]:
                out.pop("format")
        else:
            out[key] = _to_openapi(value, prefix, v3)
    if v3 and "$ref" in out and len(out) > 1:
        ref = out.pop("$ref")
        out["allOf"] = [{"$ref": ref}]
    return out


def _refs(schema: Any, found: set[str]) -> None:
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF):
            name = ref[len(_REF):]
            if name not in found:
                found.add(name)
                _refs(builtin_definitions().get(name), found)
        for value in schema.values():
            _refs(value, found)
    elif isinstance(schema, list):
        for value in schema:
            _refs(value, found)


def _crd_schema(rt: ResourceType, version: str) -> dict[str, Any]:
    schema = copy.deepcopy(rt.schemas.get(version) or {"type": "object",
                                                        "x-kubernetes-preserve-unknown-fields": True})
    props = schema.setdefault("properties", {})
    props.setdefault("apiVersion", {"type": "string", "description": "APIVersion defines the versioned schema of "
                                    "this representation of an object."})
    props.setdefault("kind", {"type": "string", "description": "Kind is a string value representing the REST "
                              "resource this object represents."})
    props["metadata"] = {"$ref": _REF + "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
                         "description": "Standard object's metadata."}
    schema["type"] = "object"
    schema["x-kubernetes-group-version-kind"] = [{"group": rt.group, "version": version, "kind": rt.kind}]
    return schema


def _schemas_for(types: list[tuple[ResourceType, str]]) -> dict[str, dict[str, Any]]:
    """Raw (``$defs``-referencing) schemas for ``types`` and everything they reference."""
    defs = builtin_definitions()
    wanted: set[str] = {"io.k8s.apimachinery.pkg.apis.meta.v1.Status",
                        "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
                        "io.k8s.apimachinery.pkg.apis.meta.v1.Patch"}
    extra: dict[str, dict[str, Any]] = {}
    for rt, version in types:
        if rt.custom:
            extra[crd_definition_name(rt.group, version, rt.kind)] = _crd_schema(rt, version)
            wanted.add("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
            continue
        for kind in (rt.kind, rt.list_kind):
            name = definition_for(rt.group, version, kind)
            if name:
                wanted.add(name)
    closure = set(wanted)
    for name in wanted:
        _refs(defs.get(name), closure)
    out = {name: defs[name] for name in sorted(closure) if name in defs}
    out.update(extra)
    return out


def _schema_name(rt: ResourceType, version: str, kind: str) -> str | None:
    if rt.custom:
        return crd_definition_name(rt.group, version, rt.kind) if kind == rt.kind else None
    return definition_for(rt.group, version, kind)


# ---- paths ---------------------------------------------------------------------------

_WRITE_PARAMS = ("dryRun", "fieldManager", "fieldValidation")


def _param(name: str, v3: bool, *, where: str = "query", required: bool = False) -> dict[str, Any]:
    p: dict[str, Any] = {"name": name, "in": where, "uniqueItems": True}
    if required:
        p["required"] = True
    if v3:
        p["schema"] = {"type": "string" if name not in ("force", "watch") else "boolean", "uniqueItems": True}
    else:
        p["type"] = "string" if name not in ("force", "watch") else "boolean"
    return p


def _paths(types: list[tuple[ResourceType, str]], ref: str, v3: bool) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for rt, version in types:
        base = f"/apis/{rt.group}/{version}" if rt.group else f"/api/{version}"
        ns = "/namespaces/{namespace}" if rt.namespaced else ""
        gvk = {"group": rt.group, "version": version, "kind": rt.kind}
        obj = _schema_name(rt, version, rt.kind)
        lst = _schema_name(rt, version, rt.list_kind)

        def op(action: str, op_id: str, schema: str | None, params: tuple[str, ...] = (), *, body: bool = False,
               gvk: dict[str, str] = gvk) -> dict[str, Any]:
            o: dict[str, Any] = {"operationId": op_id, "x-kubernetes-action": action,
                                 "x-kubernetes-group-version-kind": gvk,
                                 "parameters": [_param(p, v3) for p in params]}
            response = {"$ref": ref + schema} if schema else {"type": "object"}
            if v3:
                o["responses"] = {"200": {"description": "OK", "content": {"application/json": {"schema": response}}}}
                if body:
                    o["requestBody"] = {"content": {"*/*": {"schema": response}}, "required": True}
            else:
                o["responses"] = {"200": {"description": "OK", "schema": response}}
                o["consumes"] = ["*/*"]
                o["produces"] = ["application/json", "application/yaml"]
                if body:
                    o["parameters"].append({"name": "body", "in": "body", "required": True, "schema": response})
            return o

        name_params = [_param("name", v3, where="path", required=True)]
        ns_params = [_param("namespace", v3, where="path", required=True)] if rt.namespaced else []
        op_kind = f"{rt.group.split('.')[0].title() if rt.group else 'Core'}{version.title()}{rt.kind}"
        collection = {
            "get": op("list", f"list{op_kind}", lst, ("labelSelector", "fieldSelector", "limit", "continue", "watch")),
            "post": op("post", f"create{op_kind}", obj, _WRITE_PARAMS, body=True),
            "delete": op("deletecollection", f"deletecollection{op_kind}", "io.k8s.apimachinery.pkg.apis.meta.v1.Status"),
            "parameters": ns_params,
        }
        item = {
            "get": op("get", f"read{op_kind}", obj),
            "put": op("put", f"replace{op_kind}", obj, _WRITE_PARAMS, body=True),
            "patch": op("patch", f"patch{op_kind}", obj, (*_WRITE_PARAMS, "force"), body=True),
            "delete": op("delete", f"delete{op_kind}", obj, ("gracePeriodSeconds", "propagationPolicy")),
            "parameters": [*name_params, *ns_params],
        }
        paths[f"{base}{ns}/{rt.plural}"] = collection
        paths[f"{base}{ns}/{rt.plural}/{{name}}"] = item
        for sub in sorted(rt.subresources & {"status"}):
            paths[f"{base}{ns}/{rt.plural}/{{name}}/{sub}"] = {
                "get": op("get", f"read{op_kind}Status", obj),
                "put": op("put", f"replace{op_kind}Status", obj, _WRITE_PARAMS, body=True),
                "patch": op("patch", f"patch{op_kind}Status", obj, (*_WRITE_PARAMS, "force"), body=True),
                "parameters": [*name_params, *ns_params],
            }
    return paths


def _served(registry: Registry) -> list[tuple[ResourceType, str]]:
    return [(rt, v) for rt in registry.all() for v in rt.versions]


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


_CACHE: dict[Any, Any] = {}


def _fingerprint(registry: Registry) -> str:
    parts = [(rt.group, rt.plural, rt.versions, rt.kind, rt.namespaced, sorted(rt.subresources), rt.schemas)
             for rt in sorted(registry.all(), key=lambda r: r.key)]
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _cached(kind: str, registry: Registry, arg: str, build: Any) -> Any:
    key = (kind, _fingerprint(registry), arg)
    if key not in _CACHE:
        if len(_CACHE) > 256:
            _CACHE.clear()
        _CACHE[key] = build()
    return _CACHE[key]


def v2(registry: Registry) -> dict[str, Any]:
    """The swagger 2.0 document of everything served."""
    return _cached("v2", registry, "", lambda: _v2(registry))


def _v2(registry: Registry) -> dict[str, Any]:
    types = _served(registry)
    ref = "#/definitions/"
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": f"v1.{KUBERNETES_MINOR}.0"},
        "paths": _paths(types, ref, v3=False),
        "definitions": {k: _to_openapi(v, ref, v3=False) for k, v in _schemas_for(types).items()},
    }


def v3_document(registry: Registry, gv_path: str) -> dict[str, Any] | None:
    """The OpenAPI 3.0 document of one group-version (``api/v1``, ``apis/apps/v1``), or None."""
    return _cached("v3", registry, gv_path, lambda: _v3_document(registry, gv_path))


def _v3_document(registry: Registry, gv_path: str) -> dict[str, Any] | None:
    types = [(rt, v) for rt, v in _served(registry) if _gv_path(rt.group, v) == gv_path]
    if not types:
        return None
    ref = "#/components/schemas/"
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": f"v1.{KUBERNETES_MINOR}.0"},
        "paths": _paths(types, ref, v3=True),
        "components": {"schemas": {k: _to_openapi(v, ref, v3=True) for k, v in _schemas_for(types).items()}},
    }


def v3_index(registry: Registry) -> dict[str, Any]:
    """``/openapi/v3``: each group-version's document with its hash, as kube-openapi serves it."""
    def build() -> dict[str, Any]:
        paths: dict[str, Any] = {}
        for gv in sorted({_gv_path(rt.group, v) for rt, v in _served(registry)}):
            doc = v3_document(registry, gv)
            digest = hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest().upper()
            paths[gv] = {"serverRelativeURL": f"/openapi/v3/{gv}?hash={digest}"}
        return {"paths": paths}

    return _cached("v3index", registry, "", build)
