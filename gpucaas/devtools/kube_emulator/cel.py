"""CEL ``x-kubernetes-validations`` of CRD schemas, evaluated with ``cel-python`` (``celpy``).

As the apiextensions server does (k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel,
``validation.go``; the CRD reference "Validation rules"):

- every schema node with ``x-kubernetes-validations`` is checked for each value at that
  node: ``self`` is the value, ``oldSelf`` the value at the same place in the stored
  object on an update;
- a rule that mentions ``oldSelf`` is a *transition rule*: it runs only on updates where
  the old value exists (unless ``optionalOldSelf: true``, where ``oldSelf`` is then
  ``null``-like and the rule decides); list items are correlated by their map keys
  (``x-kubernetes-list-type: map``), other list items are not;
- a failing rule becomes one ``Status`` cause: ``field`` is the node's path (plus the
  rule's ``fieldPath``), ``reason`` the rule's ``reason`` (``FieldValueInvalid`` by
  default), ``message`` ``Invalid value: "<type>": <message>`` where the message is
  ``messageExpression`` (when it evaluates to a non-empty string), else ``message``,
  else ``failed rule: <rule>``;
- rules are compiled when the CRD is created or updated; a rule that does not compile
  makes the CRD invalid;
- ratcheting (KEP-4008, ``CRDValidationRatcheting``, on by default since v1.30): on an
  update, a rule that does not mention ``oldSelf`` and fails at a correlated node whose
  value equals its old value is only a warning (``validation.go``: ``if
  !compiled.UsesOldSelf && correlation.shouldRatchetError()``). Such rules are therefore
  not evaluated at all here (the emulator returns no warnings), and an unchanged subtree
  without transition rules is not walked: a status write or a metadata patch leaves the
  spec's rules alone, as on a real server.

Simplified: no cost budget, no Kubernetes CEL libraries beyond what ``celpy`` has
(``quantity()``, ``url()``, ``isSorted()``... are absent), ``self`` at the root has
``metadata.name``/``generateName`` only, as on a real server.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import threading
from typing import Any

import celpy
import lark
from celpy.evaluation import TranspilerTree

from gpucaas.devtools.kube_emulator.errors import field_error
from gpucaas.devtools.kube_emulator.validation import json_type_name

_OLD_SELF = re.compile(r"\boldSelf\b")
_MESSAGES = {
    "FieldValueInvalid": 'Invalid value: "{type}": {msg}',
    "FieldValueForbidden": "Forbidden: {msg}",
    "FieldValueRequired": "Required value: {msg}",
    "FieldValueDuplicate": 'Duplicate value: "{type}": {msg}',
}


@functools.lru_cache(maxsize=2048)
def _program(expression: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(expression))


class _QuietTranspiler(logging.Filter):
    """Drops celpy's "Internal error" records of a transpiled rule that raised: such a rule is
    evaluated again by the interpreter, whose outcome (and error text) is the one reported."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Internal error")


logging.getLogger("celpy.Transpiler").addFilter(_QuietTranspiler())
#: A transpiled program runs through celpy's module globals (``base_activation``): one at a time.
_TRANSPILED_LOCK = threading.Lock()


@functools.lru_cache(maxsize=2048)
def _transpiled(expression: str) -> Any:
    """``expression`` transpiled to Python by celpy (about ten times faster than interpreting
    it); None where celpy cannot transpile it."""
    try:
        env = celpy.Environment(runner_class=celpy.CompiledRunner)
        # celpy keeps one parser per process, whose tree class is its first user's: the
        # transpiler needs its own tree class, whatever that was.
        return env.program(_transpiler_tree(env.compile(expression)))
    except Exception:  # noqa: BLE001 - any transpiler gap: the interpreter alone serves it
        return None


def _transpiler_tree(node: Any) -> Any:
    if isinstance(node, lark.Tree):
        return TranspilerTree(node.data, [_transpiler_tree(c) for c in node.children], node.meta)
    return node


def compile_error(expression: str) -> str | None:
    """Why ``expression`` does not compile (None when it does)."""
    try:
        _program(expression)
    except Exception as exc:  # celpy raises its own parser errors (CELParseError, lark errors)
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return None


def _evaluate(expression: str, self_value: Any, old_value: Any, has_old: bool) -> Any:
    activation = {"self": celpy.json_to_cel(self_value)}
    if has_old:
        activation["oldSelf"] = celpy.json_to_cel(old_value)
    fast = _transpiled(expression)
    if fast is not None:
        # A value from the transpiled rule is the interpreter's value; an error (or a gap in the
        # transpiler) is left to the interpreter below, whose errors are the ones reported.
        try:
            with _TRANSPILED_LOCK:
                result = fast.evaluate(activation)
        except Exception:  # noqa: BLE001
            result = None
        if result is not None and not isinstance(result, celpy.CELEvalError):
            return result
    result = _program(expression).evaluate(activation)
    if isinstance(result, celpy.CELEvalError):
        raise result
    return result


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def validate(obj: dict[str, Any], old: dict[str, Any] | None, schema: dict[str, Any]) -> list[dict[str, str]]:
    """The causes of every CEL rule ``obj`` (replacing ``old``, None on create) breaks."""
    def strip(o: dict[str, Any] | None) -> dict[str, Any] | None:
        if o is None:
            return None
        out = {k: v for k, v in o.items() if k != "metadata"}
        meta = o.get("metadata") or {}
        out["metadata"] = {k: meta[k] for k in ("name", "generateName") if k in meta}
        return out

    causes: list[dict[str, str]] = []
    _walk(strip(obj), strip(old), old is not None, schema, "", causes)
    return causes


#: id(schema node) -> (the node, whether a rule in its subtree mentions oldSelf); nodes are kept
#: alive by the entry, so an id is never reused while cached.
_TRANSITIONS: dict[int, tuple[dict[str, Any], bool]] = {}


def _has_transition_rules(schema: dict[str, Any]) -> bool:
    """Whether any rule at or below ``schema`` mentions ``oldSelf`` (cached per schema node)."""
    hit = _TRANSITIONS.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    found = any(_OLD_SELF.search(r.get("rule") or "") for r in schema.get("x-kubernetes-validations") or [])
    subs = [*(schema.get("properties") or {}).values(), schema.get("additionalProperties"), schema.get("items")]
    found = found or any(isinstance(sub, dict) and _has_transition_rules(sub) for sub in subs)
    if len(_TRANSITIONS) > 100_000:  # CRDs replaced many times over: start again
        _TRANSITIONS.clear()
    _TRANSITIONS[id(schema)] = (schema, found)
    return found


def _walk(value: Any, old: Any, has_old: bool, schema: dict[str, Any], path: str,
          causes: list[dict[str, str]]) -> None:
    if not isinstance(schema, dict):
        return
    unchanged = has_old and value == old  # a correlated node equal to its old value: ratcheted
    if unchanged and not _has_transition_rules(schema):
        return
    for rule in schema.get("x-kubernetes-validations") or []:
        if unchanged and not _OLD_SELF.search(rule.get("rule") or ""):
            continue
        cause = _check(rule, value, old, has_old, path)
        if cause is not None:
            causes.append(cause)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, sub in value.items():
            sub_schema = props.get(key) if key in props else (extra if isinstance(extra, dict) else None)
            if sub_schema is None:
                continue
            old_has = has_old and isinstance(old, dict) and key in old
            _walk(sub, old.get(key) if old_has else None, old_has, sub_schema, _join(path, key), causes)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        keys = schema.get("x-kubernetes-list-map-keys") if schema.get("x-kubernetes-list-type") == "map" else None
        for i, item in enumerate(value):
            old_item, old_has = None, False
            if keys and has_old and isinstance(old, list) and isinstance(item, dict):
                match = [o for o in old if isinstance(o, dict) and all(o.get(k) == item.get(k) for k in keys)]
                if match:
                    old_item, old_has = match[0], True
            _walk(item, old_item, old_has, schema["items"], _join(path, i), causes)


def _check(rule: dict[str, Any], value: Any, old: Any, has_old: bool, path: str) -> dict[str, str] | None:
    expression = rule.get("rule") or ""
    transition = bool(_OLD_SELF.search(expression))
    if transition and not has_old and not rule.get("optionalOldSelf"):
        return None
    field = path + (rule.get("fieldPath") or "") if rule.get("fieldPath") else path
    field = field.lstrip(".") if field.startswith(".") and not path else field
    reason = rule.get("reason") or "FieldValueInvalid"
    try:
        ok = _evaluate(expression, value, old, has_old)
    except Exception as exc:  # an evaluation error fails the rule, as on a real server
        return field_error(field, "FieldValueInvalid",
                           f'Invalid value: "{json_type_name(value)}": {_error_text(exc)} evaluating rule: {expression}')
    if ok is True or (not isinstance(ok, bool) and bool(ok)):
        return None
    message = rule.get("message") or f"failed rule: {expression}"
    if rule.get("messageExpression"):
        try:
            text = _evaluate(rule["messageExpression"], value, old, has_old)
            if isinstance(text, str) and text.strip():
                message = str(text)
        except Exception:  # the real server falls back to message when messageExpression fails
            pass
    template = _MESSAGES.get(reason, _MESSAGES["FieldValueInvalid"])
    return field_error(field, reason, template.format(type=json_type_name(value), msg=message))


def _error_text(exc: Exception) -> str:
    args = getattr(exc, "args", ())
    if args and isinstance(args[0], str):
        return args[0]
    return str(exc)


def crd_rule_errors(crd: dict[str, Any]) -> list[dict[str, str]]:
    """Causes for CEL rules in a CRD's schemas that do not compile (and for bad reasons)."""
    causes: list[dict[str, str]] = []
    for i, version in enumerate((crd.get("spec") or {}).get("versions") or []):
        schema = ((version or {}).get("schema") or {}).get("openAPIV3Schema")
        if isinstance(schema, dict):
            _crd_walk(schema, f"spec.versions[{i}].schema.openAPIV3Schema", causes)
    return causes


def _crd_walk(schema: dict[str, Any], path: str, causes: list[dict[str, str]]) -> None:
    for j, rule in enumerate(schema.get("x-kubernetes-validations") or []):
        where = f"{path}.x-kubernetes-validations[{j}]"
        if not isinstance(rule, dict) or not rule.get("rule"):
            causes.append(field_error(f"{where}.rule", "FieldValueRequired", "Required value"))
            continue
        for key in ("rule", "messageExpression"):
            if rule.get(key):
                err = compile_error(rule[key])
                if err:
                    causes.append(field_error(f"{where}.{key}", "FieldValueInvalid",
                                              f"Invalid value: {json.dumps(rule[key])}: compilation failed: {err}"))
        if rule.get("reason") and rule["reason"] not in _MESSAGES:
            causes.append(field_error(f"{where}.reason", "FieldValueNotSupported",
                                      f'Unsupported value: {json.dumps(rule["reason"])}: supported values: '
                                      '"FieldValueDuplicate", "FieldValueForbidden", "FieldValueInvalid", '
                                      '"FieldValueRequired"'))
    for key, sub in (schema.get("properties") or {}).items():
        if isinstance(sub, dict):
            _crd_walk(sub, f"{path}.properties[{key}]", causes)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            _crd_walk(schema[key], f"{path}.{key}", causes)
