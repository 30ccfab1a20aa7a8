"""Validation of objects: metadata (names, labels) and custom resources against their CRD schema.

The structural OpenAPI v3 schema checks follow the API server: ``type`` (with
``nullable``, ``x-kubernetes-int-or-string``), ``required``, ``enum``, ``pattern``,
``minimum``/``maximum`` (and exclusive), ``minLength``/``maxLength``,
``minItems``/``maxItems``, ``uniqueItems``, ``minProperties``/``maxProperties``,
``properties``/``additionalProperties``/``items``, ``allOf``/``anyOf``/``oneOf``/``not``
and the ``date-time`` format. Each failure becomes one ``Status`` cause with the
field path (``spec.pciAddress``). ``default`` values are filled in. Unknown fields are pruned unless the schema says
``x-kubernetes-preserve-unknown-fields: true``, as the real server does.
``x-kubernetes-validations`` (CEL) rules are not evaluated (README: simplifications).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from gpucaas.devtools.kube_emulator.errors import field_error

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")

# resources whose names must be DNS-1123 labels rather than subdomains.
LABEL_NAMED = {("", "namespaces"), ("", "services")}


def _json(value: Any) -> str:
    import json

    return json.dumps(value)


def validate_name(key: tuple[str, str], name: str, field: str = "metadata.name") -> list[dict[str, str]]:
    if key in LABEL_NAMED:
        if len(name) > 63 or not DNS_LABEL.match(name):
            return [field_error(field, "FieldValueInvalid",
                                f"Invalid value: {_json(name)}: a lowercase RFC 1123 label must consist of lower case "
                                "alphanumeric characters or '-', and must start and end with an alphanumeric character")]
        return []
    if key == ("apiextensions.k8s.io", "customresourcedefinitions") or key[0] and not key[1]:
        pass
    if len(name) > 253 or not DNS_SUBDOMAIN.match(name):
        if key[0] in ("rbac.authorization.k8s.io",):
            return []
        return [field_error(field, "FieldValueInvalid",
                            f"Invalid value: {_json(name)}: a lowercase RFC 1123 subdomain must consist of lower case "
                            "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character")]
    return []


def _qualified_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(QUALIFIED_NAME.match(name))


def validate_metadata(meta: dict[str, Any]) -> list[dict[str, str]]:
    causes: list[dict[str, str]] = []
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        return [field_error("metadata.labels", "FieldValueInvalid", "Invalid value: must be a map of strings")]
    for k, v in labels.items():
        if not _qualified_key(str(k)):
            causes.append(field_error("metadata.labels", "FieldValueInvalid",
                                      f"Invalid value: {_json(k)}: name part must consist of alphanumeric characters, "
                                      "'-', '_' or '.', and must start and end with an alphanumeric character"))
        if not isinstance(v, str) or len(v) > 63 or not LABEL_VALUE.match(v):
            causes.append(field_error("metadata.labels", "FieldValueInvalid",
                                      f"Invalid value: {_json(v)}: a valid label must be an empty string or consist of "
                                      "alphanumeric characters, '-', '_' or '.', and must start and end with an "
                                      "alphanumeric character (at most 63 characters)"))
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict):
        causes.append(field_error("metadata.annotations", "FieldValueInvalid", "Invalid value: must be a map"))
    else:
        for k, v in annotations.items():
            if not _qualified_key(str(k)):
                causes.append(field_error("metadata.annotations", "FieldValueInvalid",
                                          f"Invalid value: {_json(k)}: not a qualified name"))
            if not isinstance(v, str):
                causes.append(field_error(f"metadata.annotations[{k}]", "FieldValueInvalid",
                                          "Invalid value: annotation values must be strings"))
    finalizers = meta.get("finalizers") or []
    if not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers):
        causes.append(field_error("metadata.finalizers", "FieldValueInvalid", "Invalid value: must be a list of strings"))
    return causes


# ---- OpenAPI v3 structural schemas ------------------------------------------------------

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
}


def _path(parent: str, child: str | int) -> str:
    if isinstance(child, int):
        return f"{parent}[{child}]"
    return f"{parent}.{child}" if parent else child


def validate_schema(value: Any, schema: dict[str, Any], path: str = "") -> list[dict[str, str]]:
    """Causes for every way ``value`` breaks ``schema`` (empty when valid)."""
    errors: list[dict[str, str]] = []
    where = path or "<root>"
    if value is None:
        if schema.get("nullable"):
            return []
        if "type" in schema or schema.get("x-kubernetes-int-or-string"):
            want = "integer or string" if schema.get("x-kubernetes-int-or-string") else schema["type"]
            return [field_error(where, "FieldValueTypeInvalid", f'Invalid value: "null": {where} in body must be of type {want}: "null"')]
        return []
    if schema.get("x-kubernetes-int-or-string"):
        if not (isinstance(value, str) or _TYPES["integer"](value)):
            return [field_error(where, "FieldValueTypeInvalid",
                                f"Invalid value: {_json(value)}: {where} in body must be of type integer or string")]
    elif "type" in schema:
        t = schema["type"]
        check = _TYPES.get(t)
        if check and not check(value):
            actual = json_type_name(value)
            return [field_error(where, "FieldValueTypeInvalid",
                                f'Invalid value: "{actual}": {where} in body must be of type {t}: "{actual}"')]
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(_json(e) for e in schema["enum"])
        errors.append(field_error(where, "FieldValueNotSupported",
                                  f"Unsupported value: {_json(value)}: supported values: {allowed}"))
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(field_error(where, "FieldValueInvalid",
                                      f"Invalid value: {_json(value)}: {where} in body should match '{schema['pattern']}'"))
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(field_error(where, "FieldValueTooLong",
                                      f"Too long: may not be more than {schema['maxLength']} bytes"))
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append(field_error(where, "FieldValueInvalid",
                                      f"Invalid value: {_json(value)}: {where} in body should be at least "
                                      f"{schema['minLength']} chars long"))
        if schema.get("format") == "date-time" and not _is_datetime(value):
            errors.append(field_error(where, "FieldValueInvalid",
                                      f"Invalid value: {_json(value)}: {where} in body must be of type date-time"))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema:
            lo = schema["minimum"]
            if value < lo or (schema.get("exclusiveMinimum") is True and value == lo):
                op = "greater than" if schema.get("exclusiveMinimum") is True else "greater than or equal to"
                errors.append(field_error(where, "FieldValueInvalid",
                                          f"Invalid value: {_json(value)}: {where} in body should be {op} {lo}"))
        if "maximum" in schema:
            hi = schema["maximum"]
            if value > hi or (schema.get("exclusiveMaximum") is True and value == hi):
                op = "less than" if schema.get("exclusiveMaximum") is True else "less than or equal to"
                errors.append(field_error(where, "FieldValueInvalid",
                                          f"Invalid value: {_json(value)}: {where} in body should be {op} {hi}"))
        if "multipleOf" in schema and value % schema["multipleOf"]:
            errors.append(field_error(where, "FieldValueInvalid",
                                      f"Invalid value: {_json(value)}: {where} in body should be a multiple of "
                                      f"{schema['multipleOf']}"))
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(field_error(where, "FieldValueTooMany",
                                      f"Too many: {len(value)}: must have at most {schema['maxItems']} items"))
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append(field_error(where, "FieldValueInvalid",
                                      f"Invalid value: {len(value)}: {where} in body should have at least "
                                      f"{schema['minItems']} items"))
        if schema.get("uniqueItems"):
            seen: list[Any] = []
            for i, item in enumerate(value):
                if item in seen:
                    errors.append(field_error(_path(path, i), "FieldValueDuplicate", f"Duplicate value: {_json(item)}"))
                seen.append(item)
        if isinstance(schema.get("items"), dict):
            for i, item in enumerate(value):
                errors.extend(validate_schema(item, schema["items"], _path(path, i)))
    if isinstance(value, dict):
        for req in schema.get("required") or ():
            if req not in value:
                errors.append(field_error(_path(path, req), "FieldValueRequired", "Required value"))
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            errors.append(field_error(where, "FieldValueTooMany",
                                      f"Too many: {len(value)}: must have at most {schema['maxProperties']} items"))
        if "minProperties" in schema and len(value) < schema["minProperties"]:
            errors.append(field_error(where, "FieldValueInvalid",
                                      f"Invalid value: {len(value)}: {where} in body should have at least "
                                      f"{schema['minProperties']} properties"))
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for k, v in value.items():
            if k in props:
                errors.extend(validate_schema(v, props[k], _path(path, k)))
            elif isinstance(extra, dict):
                errors.extend(validate_schema(v, extra, _path(path, k)))
    for sub in schema.get("allOf") or ():
        errors.extend(validate_schema(value, sub, path))
    if schema.get("anyOf") and not any(not validate_schema(value, s, path) for s in schema["anyOf"]):
        errors.append(field_error(where, "FieldValueInvalid", f"Invalid value: {_json(value)}: must match a schema in anyOf"))
    if schema.get("oneOf") and sum(1 for s in schema["oneOf"] if not validate_schema(value, s, path)) != 1:
        errors.append(field_error(where, "FieldValueInvalid", f"Invalid value: {_json(value)}: must match exactly one schema in oneOf"))
    if isinstance(schema.get("not"), dict) and not validate_schema(value, schema["not"], path):
        errors.append(field_error(where, "FieldValueInvalid", f"Invalid value: {_json(value)}: must not match the schema in not"))
    return errors


def apply_defaults(value: Any, schema: dict[str, Any]) -> Any:
    """Fill ``default`` values of absent properties (in place), as structural defaulting does."""
    if isinstance(value, dict):
        for k, sub in (schema.get("properties") or {}).items():
            if k not in value and "default" in sub:
                import copy

                value[k] = copy.deepcopy(sub["default"])
            if k in value:
                apply_defaults(value[k], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for k in value:
                if k not in (schema.get("properties") or {}):
                    apply_defaults(value[k], extra)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            apply_defaults(item, schema["items"])
    return value


def prune(value: Any, schema: dict[str, Any], *, root: bool = False) -> Any:
    """Drop fields the schema does not know (in place; returns ``value``)."""
    if schema.get("x-kubernetes-preserve-unknown-fields") or schema.get("x-kubernetes-embedded-resource"):
        if isinstance(value, dict) and schema.get("properties"):
            for k, sub in schema["properties"].items():
                if k in value:
                    value[k] = prune(value[k], sub)
        return value
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if props is not None or root:
            for k in list(value):
                if root and k in ("apiVersion", "kind", "metadata"):
                    continue
                if props and k in props:
                    value[k] = prune(value[k], props[k])
                elif isinstance(extra, dict):
                    value[k] = prune(value[k], extra)
                elif extra is True:
                    continue
                else:
                    del value[k]
        elif isinstance(extra, dict):
            for k in list(value):
                value[k] = prune(value[k], extra)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune(item, schema["items"]) for item in value]
    return value


def json_type_name(value: Any) -> str:
    """The JSON type of a decoded value, as the API server names it in field errors."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _is_datetime(value: str) -> bool:
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def validate_crd(crd: dict[str, Any]) -> list[dict[str, str]]:
    """The checks on a CustomResourceDefinition before it is served."""
    causes: list[dict[str, str]] = []
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return [field_error("spec", "FieldValueRequired", "Required value")]
    names = spec.get("names") or {}
    for f in ("plural", "kind"):
        if not names.get(f):
            causes.append(field_error(f"spec.names.{f}", "FieldValueRequired", "Required value"))
    if not spec.get("group"):
        causes.append(field_error("spec.group", "FieldValueRequired", "Required value"))
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        causes.append(field_error("spec.scope", "FieldValueNotSupported",
                                  f'Unsupported value: {_json(spec.get("scope"))}: supported values: "Cluster", "Namespaced"'))
    versions = spec.get("versions") or []
    if not versions:
        causes.append(field_error("spec.versions", "FieldValueRequired", "Required value"))
    elif sum(1 for v in versions if v.get("storage")) != 1:
        causes.append(field_error("spec.versions", "FieldValueInvalid", "Invalid value: must have exactly one version marked as storage version"))
    for i, v in enumerate(versions):
        if not isinstance(v, dict) or not v.get("name"):
            causes.append(field_error(f"spec.versions[{i}].name", "FieldValueRequired", "Required value"))
        elif not isinstance((v.get("schema") or {}).get("openAPIV3Schema"), dict):
            causes.append(field_error(f"spec.versions[{i}].schema.openAPIV3Schema", "FieldValueRequired",
                                      "Required value: schemas are required"))
    name = (crd.get("metadata") or {}).get("name")
    if names.get("plural") and spec.get("group") and name != f"{names['plural']}.{spec['group']}":
        causes.append(field_error("metadata.name", "FieldValueInvalid",
                                  f"Invalid value: {_json(name)}: must be spec.names.plural+\".\"+spec.group"))
    return causes
