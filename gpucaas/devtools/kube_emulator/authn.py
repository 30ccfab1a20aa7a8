"""Authentication in the emulator: bearer tokens to users, as kube-apiserver does.

Three kinds of token, each modelled on an authenticator of kube-apiserver
(k8s.io/apiserver/pkg/authentication, kubernetes/pkg/serviceaccount):

- the emulator's cluster-admin token (user ``kubernetes-admin`` in group
  ``system:masters``, like the client certificate kubeadm writes into ``admin.conf``),
  which goes into the kubeconfig the emulator writes;
- static tokens (``--token-auth-file``: CSV lines ``token,user,uid,"group1,group2"``,
  the format of kube-apiserver's static token file), for identities that are not
  ServiceAccounts, such as a kubelet's ``system:node:<name>`` or ``system:kube-scheduler``;
- ServiceAccount tokens minted by TokenRequest
  (``POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token``): JWTs whose claims
  follow kubernetes/pkg/serviceaccount/claims.go (``sub``, ``aud``, ``exp``,
  ``kubernetes.io.namespace``, ``kubernetes.io.serviceaccount.{name,uid}``). They are
  signed with HS256 under a per-emulator key (a real server signs RS256/ES256 with the
  service-account key); a token is valid while unexpired and while its ServiceAccount
  exists with the same uid (bound tokens stop working when the account is deleted).

Every authenticated user also gets ``system:authenticated``; a ServiceAccount user is
``system:serviceaccount:<ns>:<name>`` in ``system:serviceaccounts`` and
``system:serviceaccounts:<ns>`` (k8s.io/apiserver/pkg/authentication/serviceaccount/util.go).
A request with no token is ``system:anonymous`` in ``system:unauthenticated`` when
anonymous auth is on (kube-apiserver ``--anonymous-auth``); otherwise, as with a bad
token, the answer is 401 ``Unauthorized``.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import hmac
import json
import secrets
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpucaas.devtools.kube_emulator import errors

ADMIN_USER = "kubernetes-admin"
MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS = "system:anonymous"
SA_PREFIX = "system:serviceaccount:"
SA_GROUP = "system:serviceaccounts"
ISSUER = "https://kubernetes.default.svc.cluster.local"
DEFAULT_TOKEN_SECONDS = 3600  # TokenRequestSpec.expirationSeconds default
MIN_TOKEN_SECONDS = 600  # "may not specify a duration less than 10 minutes"
SA_KEY = ("", "serviceaccounts")


@dataclass(frozen=True)
class User:
    """user.Info: name, uid, groups, extra."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict, compare=False, hash=False)

    def info(self) -> dict[str, Any]:
        """The UserInfo object of authentication.k8s.io/v1."""
        out: dict[str, Any] = {"username": self.name, "groups": list(self.groups)}
        if self.uid:
            out["uid"] = self.uid
        if self.extra:
            out["extra"] = self.extra
        return out


def service_account_user(namespace: str, name: str, uid: str = "") -> User:
    return User(f"{SA_PREFIX}{namespace}:{name}", uid,
                (SA_GROUP, f"{SA_GROUP}:{namespace}", AUTHENTICATED))


def with_authenticated(user: User) -> User:
    groups = tuple(user.groups) + ((AUTHENTICATED,) if AUTHENTICATED not in user.groups else ())
    return User(user.name, user.uid, groups, user.extra)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def parse_token_file(path: str | Path) -> dict[str, User]:
    """kube-apiserver's ``--token-auth-file``: ``token,user,uid[,"group1,group2"]`` per line."""
    users: dict[str, User] = {}
    with open(path, newline="") as fh:
        for lineno, row in enumerate(csv.reader(fh), 1):
            if not row or row[0].startswith("#"):
                continue
            if len(row) < 3:
                raise ValueError(f"{path}:{lineno}: expected token,user,uid[,groups]")
            groups = tuple(g.strip() for g in row[3].split(",") if g.strip()) if len(row) > 3 else ()
            users[row[0].strip()] = with_authenticated(User(row[1].strip(), row[2].strip(), groups))
    return users


class Authenticator:
    """Turns a request's ``Authorization: Bearer`` header into a :class:`User`."""

    def __init__(self, *, admin_token: str | None = None, static_tokens: dict[str, User] | None = None,
                 anonymous: bool = False) -> None:
        self.admin_token = admin_token or f"gpucaas-admin-{secrets.token_urlsafe(24)}"
        self.signing_key = secrets.token_bytes(32)
        self.static: dict[str, User] = dict(static_tokens or {})
        self.anonymous = anonymous

    # ---- persisted state (so a restarted emulator keeps its kubeconfig and tokens valid) ----

    def state(self) -> dict[str, Any]:
        return {"adminToken": self.admin_token, "signingKey": _b64(self.signing_key)}

    def restore(self, state: dict[str, Any] | None, *, keep_admin_token: bool = False) -> None:
        if not state:
            return
        if not keep_admin_token and state.get("adminToken"):
            self.admin_token = state["adminToken"]
        if state.get("signingKey"):
            self.signing_key = _unb64(state["signingKey"])

    # ---- authentication ---------------------------------------------------------------

    def authenticate(self, authorization: str | None, store: Any) -> User:
        if not authorization:
            if self.anonymous:
                return User(ANONYMOUS, "", (UNAUTHENTICATED,))
            raise errors.Unauthorized("Unauthorized")
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise errors.Unauthorized("Unauthorized")
        if hmac.compare_digest(token, self.admin_token):
            return User(ADMIN_USER, "", (MASTERS, AUTHENTICATED))
        if token in self.static:
            return self.static[token]
        user = self._service_account(token, store)
        if user is None:
            raise errors.Unauthorized("Unauthorized")
        return user

    # ---- ServiceAccount tokens (TokenRequest) ------------------------------------------

    def issue(self, sa: dict[str, Any], spec: dict[str, Any]) -> tuple[str, int]:
        """A signed token for ``sa``; returns (token, expiry as a Unix time)."""
        seconds = int(spec.get("expirationSeconds") or DEFAULT_TOKEN_SECONDS)
        now = int(time.time())
        meta = sa["metadata"]
        claims = {
            "iss": ISSUER,
            "sub": f"{SA_PREFIX}{meta['namespace']}:{meta['name']}",
            "aud": list(spec.get("audiences") or [ISSUER]),
            "iat": now, "nbf": now, "exp": now + seconds,
            "jti": str(uuid.uuid4()),
            "kubernetes.io": {"namespace": meta["namespace"],
                              "serviceaccount": {"name": meta["name"], "uid": meta["uid"]}},
        }
        header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
        payload = _b64(json.dumps(claims, separators=(",", ":")).encode())
        sig = _b64(hmac.new(self.signing_key, f"{header}.{payload}".encode(), hashlib.sha256).digest())
        return f"{header}.{payload}.{sig}", claims["exp"]

    def _service_account(self, token: str, store: Any) -> User | None:
        parts = token.split(".")
        if len(parts) != 3:
            return None
        want = _b64(hmac.new(self.signing_key, f"{parts[0]}.{parts[1]}".encode(), hashlib.sha256).digest())
        if not hmac.compare_digest(want, parts[2]):
            return None
        try:
            claims = json.loads(_unb64(parts[1]))
            k8s = claims["kubernetes.io"]
            ns, name, uid = k8s["namespace"], k8s["serviceaccount"]["name"], k8s["serviceaccount"]["uid"]
        except (ValueError, KeyError, TypeError):
            return None
        if int(claims.get("exp", 0)) <= time.time():
            return None
        sa = store.objects.get(SA_KEY, {}).get((ns, name))
        if sa is None or sa["metadata"].get("uid") != uid or sa["metadata"].get("deletionTimestamp"):
            return None  # a bound token dies with its ServiceAccount
        user = service_account_user(ns, name, uid)
        return User(user.name, user.uid, user.groups,
                    {"authentication.kubernetes.io/credential-id": [f"JTI={claims.get('jti', '')}"]})
