"""Label and field selectors, parsed as the API server parses them.

Label selectors: ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``,
``k`` (exists) and ``!k`` (does not exist), comma-separated (all must hold).
Field selectors: ``path=value``, ``path==value``, ``path!=value`` on dotted paths;
the common ones (``metadata.name``, ``metadata.namespace``, ``spec.nodeName``,
``status.phase``) and any other dotted path of the object.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from gpucaas.devtools.kube_emulator.errors import BadRequest

Predicate = Callable[[dict[str, Any]], bool]

_SET_TERM = re.compile(r"^\s*(!?)\s*([A-Za-z0-9_./-]+)\s*(?:(in|notin)\s*\(([^)]*)\))?\s*$")
_EQ_TERM = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s*(==|=|!=)\s*([A-Za-z0-9_.-]*)\s*$")


def _split_terms(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    terms, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    terms.append("".join(cur))
    return [t for t in terms if t.strip()]


def parse_label_selector(text: str | None) -> Predicate:
    """A predicate over an object's ``metadata.labels``; BadRequest on bad syntax."""
    if not text or not text.strip():
        return lambda obj: True
    checks: list[Callable[[dict[str, str]], bool]] = []
    for term in _split_terms(text):
        m = _EQ_TERM.match(term)
        if m:
            key, op, value = m.groups()
            if op == "!=":
                checks.append(lambda lb, k=key, v=value: lb.get(k) != v)
            else:
                checks.append(lambda lb, k=key, v=value: lb.get(k) == v)
            continue
        m = _SET_TERM.match(term)
        if m:
            neg, key, op, values = m.groups()
            if op:
                if neg:
                    raise BadRequest(f"unable to parse requirement: {term!r}")
                vals = {v.strip() for v in values.split(",") if v.strip()}
                if op == "in":
                    checks.append(lambda lb, k=key, vs=vals: lb.get(k) in vs)
                else:
                    checks.append(lambda lb, k=key, vs=vals: lb.get(k) not in vs)
            elif neg:
                checks.append(lambda lb, k=key: k not in lb)
            else:
                checks.append(lambda lb, k=key: k in lb)
            continue
        raise BadRequest(f"unable to parse requirement: found {term!r}, expected: key, key=value, key!=value, "
                         "key in (values), key notin (values) or !key")

    def predicate(obj: dict[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(check(labels) for check in checks)

    return predicate


def field_value(obj: dict[str, Any], path: str) -> str:
    """The string form of a dotted field of ``obj`` ("" when absent), as field selectors compare."""
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def parse_field_selector(text: str | None) -> Predicate:
    """A predicate over the object's fields; BadRequest on bad syntax."""
    if not text or not text.strip():
        return lambda obj: True
    checks: list[Predicate] = []
    for term in _split_terms(text):
        m = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*?)\s*$", term)
        if not m:
            raise BadRequest(f"invalid selector: {text!r}; can't understand {term!r}")
        path, op, value = m.groups()
        if op == "!=":
            checks.append(lambda o, p=path, v=value: field_value(o, p) != v)
        else:
            checks.append(lambda o, p=path, v=value: field_value(o, p) == v)
    return lambda obj: all(check(obj) for check in checks)
