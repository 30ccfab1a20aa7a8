"""A Secret write refused by RBAC right after a tenancy was made is tried again for a few seconds:
kube-apiserver's authoriser sees the RoleBinding the controller made only once its informer has it."""

from __future__ import annotations

from typing import Any

import pytest

from core.kube import Forbidden
from services.api import errors
from services.api.routes import secrets


class _Kube:
    """Refuses the first ``refusals`` writes as RBAC does, then stores."""

    def __init__(self, refusals: int, *, rbac: bool = True) -> None:
        self.refusals = refusals
        self.rbac = rbac
        self.calls = 0

    def create_secret(self, body: dict[str, Any], *, replace: bool = False) -> bool:
        self.calls += 1
        if self.calls <= self.refusals:
            who = {"user": "system:serviceaccount:gpucaas-system:gpucaas-api", "verb": "create"} if self.rbac else {}
            raise Forbidden("secrets is forbidden", resource="secrets", namespace="tenant-new", **who)
        return True


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(secrets.time, "sleep", lambda _s: None)


def test_a_refusal_while_the_rolebinding_propagates_is_waited_out() -> None:
    kube = _Kube(refusals=2)
    assert secrets.write(kube, {}, replace=False, what="secret", tenancy="new") is True  # type: ignore[arg-type]
    assert kube.calls == 3


def test_a_refusal_that_lasts_is_a_503_saying_retry_later() -> None:
    kube = _Kube(refusals=100)
    with pytest.raises(errors.Unavailable, match="retry later"):
        secrets.write(kube, {}, replace=False, what="secret", tenancy="new")  # type: ignore[arg-type]
    assert kube.calls == len(secrets.RBAC_SETTLE_WAITS) + 1


def test_a_refusal_that_is_no_rbac_denial_is_not_tried_again() -> None:
    kube = _Kube(refusals=1, rbac=False)  # an admission rule's 403: the input, not the rights
    with pytest.raises(errors.BadRequest):
        secrets.write(kube, {}, replace=False, what="secret", tenancy="new")  # type: ignore[arg-type]
    assert kube.calls == 1
