"""RBAC authorization as kube-apiserver evaluates it.

Sources (kubernetes/kubernetes, read, not copied):

- request attributes: staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go
  (``RequestInfoFactory.NewRequestInfo``): ``/api/v1/...`` and ``/apis/<g>/<v>/...`` are
  resource requests, everything else (and ``/api``, ``/api/v1``, ``/apis/<g>``) is a
  non-resource path; ``watch`` for ``?watch=true`` or the ``/watch/`` prefix, ``list``
  and ``deletecollection`` on collections; ``/namespaces/<ns>`` sets the namespace even
  for the namespace object itself; a list/watch with ``fieldSelector=metadata.name=X``
  carries the name ``X`` (so ``resourceNames`` can allow it);
- evaluation: plugin/pkg/auth/authorizer/rbac/rbac.go (``RBACAuthorizer.Authorize``,
  ``RuleAllows``) and pkg/apis/rbac/v1/evaluation_helpers.go (``VerbMatches``,
  ``APIGroupMatches``, ``ResourceMatches`` with ``*`` and ``*/<subresource>``,
  ``ResourceNameMatches``, ``NonResourceURLMatches`` with trailing ``*``);
- bindings: pkg/registry/rbac/validation/rule.go (``VisitRulesFor``: ClusterRoleBindings
  first, then the RoleBindings of the request's namespace; a RoleBinding may point at a
  ClusterRole, whose rules then apply in that namespace only; ``appliesToUser``, where a
  ServiceAccount subject without a namespace takes the binding's);
- ClusterRole ``aggregationRule``: pkg/controller/clusterroleaggregation (the union of
  the rules of the ClusterRoles its selectors match). The emulator computes it at
  evaluation time instead of writing ``.rules`` from a controller;
- 403 wording: staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go
  (``forbiddenMessage``) and apimachinery ``NewForbidden``.

There is no Node authorizer: the ``system:node`` identities get their rights from RBAC.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from gpucaas.devtools.kube_emulator import errors
from gpucaas.devtools.kube_emulator.authn import MASTERS, User
from gpucaas.devtools.kube_emulator.selectors import parse_label_selector

RBAC = "rbac.authorization.k8s.io"
CR_KEY = (RBAC, "clusterroles")
CRB_KEY = (RBAC, "clusterrolebindings")
ROLE_KEY = (RBAC, "roles")
RB_KEY = (RBAC, "rolebindings")
NAMESPACE_SUBRESOURCES = ("status", "finalize")


@dataclass(frozen=True)
class Attributes:
    """authorizer.Attributes of one request."""

    user: User
    verb: str
    path: str
    resource_request: bool
    group: str = ""
    version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    def record(self, allowed: bool, reason: str = "") -> dict[str, Any]:
        """One audit entry: who did what, and whether RBAC allowed it."""
        out: dict[str, Any] = {"user": self.user.name, "groups": list(self.user.groups), "verb": self.verb,
                               "allowed": allowed}
        if self.resource_request:
            out.update(group=self.group, resource=self.resource, subresource=self.subresource,
                       namespace=self.namespace, name=self.name)
        else:
            out["path"] = self.path
        if reason:
            out["reason"] = reason
        return out


def request_attributes(user: User, method: str, path: str, query: Any) -> Attributes:
    """The authorization attributes of an HTTP request (requestinfo.go)."""
    parts = [unquote(p) for p in path.split("/") if p]
    non_resource_verb = {"GET": "get", "HEAD": "get", "POST": "post", "PUT": "put", "PATCH": "patch",
                         "DELETE": "delete", "OPTIONS": "options"}.get(method, method.lower())
    non_resource = Attributes(user, non_resource_verb, path or "/", False)
    if not parts or parts[0] not in ("api", "apis"):
        return non_resource
    if parts[0] == "api":
        if len(parts) < 3:
            return non_resource
        group, version, rest = "", parts[1], parts[2:]
    else:
        if len(parts) < 4:
            return non_resource
        group, version, rest = parts[1], parts[2], parts[3:]
    verb = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch",
            "DELETE": "delete"}.get(method, method.lower())
    if rest[0] == "watch":
        verb, rest = "watch", rest[1:]
        if not rest:
            return non_resource
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if not name:
        if verb == "get":
            verb = "list"
        elif verb == "delete":
            verb = "deletecollection"
    if verb == "list" and str(query.get("watch", "")).lower() in ("true", "1"):
        verb = "watch"
    if verb in ("list", "watch") and not name:
        for term in (query.get("fieldSelector") or "").split(","):
            key, sep, value = term.partition("=")
            if key.strip() == "metadata.name" and sep and not value.startswith("="):
                name = value.strip()
            elif key.strip() == "metadata.name" and value.startswith("="):
                name = value[1:].strip()
    return Attributes(user, verb, path, True, group, version, resource, subresource, namespace, name)


# ---- evaluation_helpers.go ------------------------------------------------------------

def verb_matches(rule: dict[str, Any], verb: str) -> bool:
    return any(v in ("*", verb) for v in rule.get("verbs") or ())


def group_matches(rule: dict[str, Any], group: str) -> bool:
    return any(g in ("*", group) for g in rule.get("apiGroups") or ())


def resource_matches(rule: dict[str, Any], resource: str, subresource: str) -> bool:
    combined = f"{resource}/{subresource}" if subresource else resource
    for r in rule.get("resources") or ():
        if r in ("*", combined):
            return True
        if subresource and r == f"*/{subresource}":
            return True
    return False


def name_matches(rule: dict[str, Any], name: str) -> bool:
    names = rule.get("resourceNames") or ()
    return not names or name in names


def url_matches(rule: dict[str, Any], path: str) -> bool:
    for u in rule.get("nonResourceURLs") or ():
        if u in ("*", path):
            return True
        if u.endswith("*") and path.startswith(u[:-1]):
            return True
    return False


def rule_allows(attrs: Attributes, rule: dict[str, Any]) -> bool:
    if attrs.resource_request:
        return (verb_matches(rule, attrs.verb) and group_matches(rule, attrs.group)
                and resource_matches(rule, attrs.resource, attrs.subresource) and name_matches(rule, attrs.name))
    return verb_matches(rule, attrs.verb) and url_matches(rule, attrs.path)


# ---- bindings (rule.go) ----------------------------------------------------------------

def applies_to(subject: dict[str, Any], user: User, binding_namespace: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return user.name == name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        ns = subject.get("namespace") or binding_namespace
        return bool(ns) and user.name == f"system:serviceaccount:{ns}:{name}"
    return False


def _table(store: Any, key: tuple[str, str]) -> dict[tuple[str, str], dict[str, Any]]:
    return store.objects.get(key, {})


def cluster_role_rules(store: Any, name: str) -> list[dict[str, Any]] | None:
    """A ClusterRole's rules, aggregated ones included; None when it does not exist."""
    role = _table(store, CR_KEY).get(("", name))
    if role is None:
        return None
    rules = list(role.get("rules") or [])
    aggregation = role.get("aggregationRule") or {}
    for selector in aggregation.get("clusterRoleSelectors") or ():
        match = parse_label_selector(_selector_string(selector))
        for (_, other_name), other in _table(store, CR_KEY).items():
            if other_name != name and match(other):
                rules.extend(r for r in other.get("rules") or [] if r not in rules)
    return rules


def _selector_string(selector: dict[str, Any]) -> str:
    terms = [f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items()]
    for expr in selector.get("matchExpressions") or ():
        op, key, values = expr.get("operator"), expr.get("key"), expr.get("values") or []
        if op == "In":
            terms.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            terms.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            terms.append(key)
        elif op == "DoesNotExist":
            terms.append(f"!{key}")
    return ",".join(terms)


def _role_rules(store: Any, ref: dict[str, Any], namespace: str) -> list[dict[str, Any]] | None:
    if ref.get("kind") == "ClusterRole":
        return cluster_role_rules(store, ref.get("name", ""))
    role = _table(store, ROLE_KEY).get((namespace, ref.get("name", "")))
    return None if role is None else list(role.get("rules") or [])


def _missing(ref: dict[str, Any], namespace: str) -> str:
    if ref.get("kind") == "ClusterRole":
        return f'clusterrole.{RBAC} "{ref.get("name")}" not found'
    return f'role.{RBAC} "{ref.get("name")}" not found'


def visit_rules(store: Any, user: User, namespace: str):  # noqa: ANN201 (generator of tuples)
    """Yield (source description, rule) for every rule bound to ``user`` in ``namespace``.

    Yields (None, error text) for a binding whose role does not exist, as
    ``VisitRulesFor`` reports it.
    """
    for (_, bname), binding in sorted(_table(store, CRB_KEY).items()):
        subject = next((s for s in binding.get("subjects") or () if applies_to(s, user, "")), None)
        if subject is None:
            continue
        ref = binding.get("roleRef") or {}
        rules = _role_rules(store, ref, "")
        if rules is None:
            yield None, _missing(ref, "")
            continue
        for rule in rules:
            yield (f'ClusterRoleBinding "{bname}" of {ref.get("kind")} "{ref.get("name")}" '
                   f'to {subject.get("kind")} "{subject.get("name")}"'), rule
    if not namespace:
        return
    for (bns, bname), binding in sorted(_table(store, RB_KEY).items()):
        if bns != namespace:
            continue
        subject = next((s for s in binding.get("subjects") or () if applies_to(s, user, bns)), None)
        if subject is None:
            continue
        ref = binding.get("roleRef") or {}
        rules = _role_rules(store, ref, bns)
        if rules is None:
            yield None, _missing(ref, bns)
            continue
        for rule in rules:
            yield (f'RoleBinding "{bname}/{bns}" of {ref.get("kind")} "{ref.get("name")}" '
                   f'to {subject.get("kind")} "{subject.get("name")}"'), rule


def authorize(store: Any, attrs: Attributes) -> tuple[bool, str]:
    """(allowed, reason) as ``RBACAuthorizer.Authorize`` answers."""
    if MASTERS in attrs.user.groups:  # the privileged-group authorizer in front of RBAC
        return True, ""
    missing: list[str] = []
    for source, rule in visit_rules(store, attrs.user, attrs.namespace):
        if source is None:
            missing.append(rule)  # type: ignore[arg-type]
            continue
        if rule_allows(attrs, rule):
            return True, f"RBAC: allowed by {source}"
    reason = f"RBAC: {', '.join(missing)}" if missing else ""
    return False, reason


def forbidden(attrs: Attributes, reason: str = "") -> errors.Forbidden:
    """The 403 the real server sends (responsewriters.Forbidden)."""
    user = attrs.user.name
    if not attrs.resource_request:
        msg = f'User "{user}" cannot {attrs.verb} path "{attrs.path}"'
        text = f"forbidden: {msg}"
        details: dict[str, Any] = {}
    else:
        resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
        if attrs.namespace:
            msg = (f'User "{user}" cannot {attrs.verb} resource "{resource}" in API group "{attrs.group}" '
                   f'in the namespace "{attrs.namespace}"')
        else:
            msg = f'User "{user}" cannot {attrs.verb} resource "{resource}" in API group "{attrs.group}" at the cluster scope'
        qualified = f"{attrs.resource}.{attrs.group}" if attrs.group else attrs.resource
        text = f'{qualified} "{attrs.name}" is forbidden: {msg}' if attrs.name else f"{qualified} is forbidden: {msg}"
        details = {"group": attrs.group, "kind": attrs.resource}
        if attrs.name:
            details["name"] = attrs.name
    if reason:
        text = f"{text}: {reason}"
    return errors.Forbidden(text, details=details)


def rules_for(store: Any, user: User, namespace: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], bool]:
    """SelfSubjectRulesReview: (resourceRules, nonResourceRules, incomplete)."""
    if MASTERS in user.groups:
        return ([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
                [{"verbs": ["*"], "nonResourceURLs": ["*"]}], False)
    resource_rules: list[dict[str, Any]] = []
    url_rules: list[dict[str, Any]] = []
    incomplete = False
    for source, rule in visit_rules(store, user, namespace):
        if source is None:
            incomplete = True
            continue
        if rule.get("nonResourceURLs"):
            url_rules.append({"verbs": list(rule.get("verbs") or []),
                              "nonResourceURLs": list(rule["nonResourceURLs"])})
        else:
            entry = {"verbs": list(rule.get("verbs") or []), "apiGroups": list(rule.get("apiGroups") or []),
                     "resources": list(rule.get("resources") or [])}
            if rule.get("resourceNames"):
                entry["resourceNames"] = list(rule["resourceNames"])
            resource_rules.append(entry)
    return resource_rules, url_rules, incomplete
