"""The emulator's request guard: authentication, RBAC, the review APIs, Pod Security admission.

Every request passes :meth:`Security.guard` before it is routed, in kube-apiserver's
order (k8s.io/apiserver/pkg/server/config.go ``DefaultBuildHandlerChain``): authenticate
(401 on failure), authorise (403), then admission for writes (Pod Security, see
:mod:`podsecurity`). It also serves the APIs that are answered from the request's
identity rather than from storage (their REST storage in kubernetes/pkg/registry):

- ``POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token`` (TokenRequest,
  ``kubectl create token``), authorised as ``create serviceaccounts/token``;
- ``authentication.k8s.io/v1`` SelfSubjectReview (``kubectl auth whoami``), TokenReview;
- ``authorization.k8s.io/v1`` SelfSubjectAccessReview (``kubectl auth can-i``),
  SelfSubjectRulesReview (``kubectl auth can-i --list``), SubjectAccessReview and
  LocalSubjectAccessReview.

Each authorisation decision is kept as an audit entry (user, verb, group, resource,
subresource, namespace, name, allowed) in memory and, when ``audit_path`` is set,
appended to that file as JSON lines, so tests can check what each identity used.
"""

from __future__ import annotations

import json
import time
from collections import deque
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web

from gpucaas.devtools.kube_emulator import errors, podsecurity, rbac
from gpucaas.devtools.kube_emulator.authn import MIN_TOKEN_SECONDS, SA_KEY, Authenticator, User

NS_KEY = ("", "namespaces")
AUTHN = "authentication.k8s.io"
AUTHZ = "authorization.k8s.io"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _json(body: Any, status: int = 201) -> web.Response:
    return web.Response(status=status, text=json.dumps(body), content_type="application/json")


class Security:
    """Authentication, authorisation, audit and admission for one emulator."""

    def __init__(self, authenticator: Authenticator | None = None, *, audit_path: str | Path | None = None,
                 audit_size: int = 200000) -> None:
        self.authn = authenticator or Authenticator()
        self.audit: deque[dict[str, Any]] = deque(maxlen=audit_size)
        self.audit_path = Path(audit_path) if audit_path else None
        self._audit_file: Any = None

    def close(self) -> None:
        if self._audit_file is not None:
            self._audit_file.close()
            self._audit_file = None

    def _record(self, entry: dict[str, Any]) -> None:
        entry["time"] = time.time()
        self.audit.append(entry)
        if self.audit_path is not None:
            if self._audit_file is None:
                self.audit_path.parent.mkdir(parents=True, exist_ok=True)
                self._audit_file = self.audit_path.open("a", buffering=1)
            self._audit_file.write(json.dumps(entry) + "\n")

    # ---- the guard -----------------------------------------------------------------

    async def guard(self, request: web.Request, store: Any) -> tuple[web.StreamResponse | None, list[str]]:
        """Authenticate and authorise ``request``; answer it if it is a review or a token request.

        Returns (response or None to route it on, warnings for the response's headers).
        """
        user = self.authn.authenticate(request.headers.get("Authorization"), store)
        attrs = rbac.request_attributes(user, request.method, request.path, request.query)
        allowed, reason = rbac.authorize(store, attrs)
        if not allowed:
            refusal = rbac.forbidden(attrs, reason)
            self._record({**attrs.record(False), "message": refusal.message})
            raise refusal
        self._record(attrs.record(True))
        if not attrs.resource_request:
            return None, []
        if attrs.verb == "create":
            answer = await self._review(request, store, attrs)
            if answer is not None:
                return answer, []
        warnings: list[str] = []
        if attrs.namespace and not attrs.subresource and (
                attrs.verb == "create" or (attrs.verb == "update" and attrs.resource != "pods")):
            body = await _body(request)
            namespace = store.objects.get(NS_KEY, {}).get(("", attrs.namespace))
            warnings = podsecurity.admit(attrs.group, attrs.resource, body, namespace)
        return None, warnings

    # ---- review APIs -----------------------------------------------------------------

    async def _review(self, request: web.Request, store: Any, attrs: rbac.Attributes) -> web.StreamResponse | None:
        key = (attrs.group, attrs.resource, attrs.subresource)
        if key == ("", "serviceaccounts", "token") and attrs.name:
            return self._token_request(store, attrs, await _object_body(request))
        if attrs.group == AUTHN and not attrs.name:
            body = await _object_body(request)
            if attrs.resource == "selfsubjectreviews":
                return _json({"kind": "SelfSubjectReview", "apiVersion": f"{AUTHN}/{attrs.version}",
                              "metadata": {"creationTimestamp": _now()},
                              "status": {"userInfo": attrs.user.info()}})
            if attrs.resource == "tokenreviews":
                return self._token_review(store, attrs, body)
        if attrs.group == AUTHZ and not attrs.name:
            body = await _object_body(request)
            if attrs.resource == "selfsubjectrulesreviews":
                return self._rules_review(store, attrs, body)
            if attrs.resource in ("selfsubjectaccessreviews", "subjectaccessreviews", "localsubjectaccessreviews"):
                return self._access_review(store, attrs, body)
        return None

    def _token_request(self, store: Any, attrs: rbac.Attributes, body: dict[str, Any]) -> web.Response:
        sa = store.objects.get(SA_KEY, {}).get((attrs.namespace, attrs.name))
        if sa is None:
            raise errors.not_found("serviceaccounts", attrs.name)
        spec = dict(body.get("spec") or {})
        seconds = spec.get("expirationSeconds")
        if seconds is not None and (not isinstance(seconds, int) or seconds < MIN_TOKEN_SECONDS):
            raise errors.Invalid("TokenRequest", attrs.name, [errors.field_error(
                "spec.expirationSeconds", "FieldValueInvalid",
                f"Invalid value: {seconds}: may not specify a duration less than 10 minutes")], AUTHN)
        token, expiry = self.authn.issue(sa, spec)
        spec.setdefault("audiences", ["https://kubernetes.default.svc.cluster.local"])
        spec["expirationSeconds"] = int(seconds or expiry - int(time.time()))
        spec.setdefault("boundObjectRef", None)
        return _json({"kind": "TokenRequest", "apiVersion": f"{AUTHN}/v1",
                      "metadata": {"name": attrs.name, "namespace": attrs.namespace, "creationTimestamp": _now()},
                      "spec": spec,
                      "status": {"token": token, "expirationTimestamp": datetime.fromtimestamp(expiry, UTC)
                                 .strftime("%Y-%m-%dT%H:%M:%SZ")}})

    def _token_review(self, store: Any, attrs: rbac.Attributes, body: dict[str, Any]) -> web.Response:
        spec = body.get("spec") or {}
        status: dict[str, Any]
        try:
            user = self.authn.authenticate(f"Bearer {spec.get('token', '')}", store)
            status = {"authenticated": True, "user": user.info(), "audiences": spec.get("audiences") or []}
        except errors.Unauthorized:
            status = {"authenticated": False, "error": "invalid bearer token"}
        return _json({"kind": "TokenReview", "apiVersion": f"{AUTHN}/{attrs.version}",
                      "metadata": {"creationTimestamp": None}, "spec": spec, "status": status})

    def _access_review(self, store: Any, attrs: rbac.Attributes, body: dict[str, Any]) -> web.Response:
        kind = {"selfsubjectaccessreviews": "SelfSubjectAccessReview", "subjectaccessreviews": "SubjectAccessReview",
                "localsubjectaccessreviews": "LocalSubjectAccessReview"}[attrs.resource]
        spec = body.get("spec") or {}
        res = spec.get("resourceAttributes")
        non_res = spec.get("nonResourceAttributes")
        if (res is None) == (non_res is None):
            raise errors.Invalid(kind, "", [errors.field_error(
                "spec.resourceAttributes", "FieldValueRequired",
                "Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified")], AUTHZ)
        if attrs.resource == "selfsubjectaccessreviews":
            user = attrs.user
        else:
            if not spec.get("user") and not spec.get("groups"):
                raise errors.Invalid(kind, "", [errors.field_error(
                    "spec.user", "FieldValueInvalid", "Invalid value: \"\": at least one of user or group must be specified")],
                    AUTHZ)
            user = User(spec.get("user") or "", spec.get("uid") or "", tuple(spec.get("groups") or ()),
                        spec.get("extra") or {})
        if attrs.resource == "localsubjectaccessreviews" and res is not None:
            if res.get("namespace", "") != attrs.namespace:
                raise errors.Invalid(kind, "", [errors.field_error(
                    "spec.resourceAttributes.namespace", "FieldValueInvalid",
                    f"Invalid value: \"{res.get('namespace', '')}\": must match metadata.namespace")], AUTHZ)
        if res is not None:
            check = rbac.Attributes(user, res.get("verb", ""), "", True, res.get("group", ""), res.get("version", ""),
                                    res.get("resource", ""), res.get("subresource", ""), res.get("namespace", ""),
                                    res.get("name", ""))
        else:
            check = rbac.Attributes(user, non_res.get("verb", ""), non_res.get("path", ""), False)
        allowed, reason = rbac.authorize(store, check)
        status: dict[str, Any] = {"allowed": allowed}
        if reason:
            status["reason"] = reason
        meta: dict[str, Any] = {"creationTimestamp": None}
        if attrs.namespace:
            meta["namespace"] = attrs.namespace
        return _json({"kind": kind, "apiVersion": f"{AUTHZ}/{attrs.version}", "metadata": meta, "spec": spec,
                      "status": status})

    def _rules_review(self, store: Any, attrs: rbac.Attributes, body: dict[str, Any]) -> web.Response:
        spec = body.get("spec") or {}
        namespace = spec.get("namespace") or ""
        if not namespace:
            raise errors.Invalid("SelfSubjectRulesReview", "", [errors.field_error(
                "spec.namespace", "FieldValueRequired", "Required value: namespace is required")], AUTHZ)
        resource_rules, url_rules, incomplete = rbac.rules_for(store, attrs.user, namespace)
        status: dict[str, Any] = {"resourceRules": resource_rules, "nonResourceRules": url_rules,
                                  "incomplete": incomplete}
        return _json({"kind": "SelfSubjectRulesReview", "apiVersion": f"{AUTHZ}/{attrs.version}",
                      "metadata": {"creationTimestamp": None}, "spec": spec, "status": status})


async def _object_body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object (its ``spec`` and attribute blocks objects too), or 400."""
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise errors.BadRequest(f"the request body is not valid JSON: {exc}") from exc
    spec = body.get("spec") if isinstance(body, dict) else None
    if not isinstance(body, dict) or not isinstance(spec if spec is not None else {}, dict) or any(
            not isinstance((spec or {}).get(k) or {}, dict) for k in ("resourceAttributes", "nonResourceAttributes")):
        raise errors.BadRequest("the request body must be a JSON object whose spec (and its attributes) are objects")
    return body


async def _body(request: web.Request) -> Any:
    raw = await request.read()  # aiohttp keeps it: the route reads the same bytes again
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None  # the route answers 400 for a body that is not JSON
