"""The namespace controller's deletion conditions on a ``Terminating`` namespace.

While a namespace is being deleted, the real namespace controller reports its progress in
``status.conditions`` (k8s.io/kubernetes/pkg/controller/namespace/deletion/
status_condition_utils.go): discovery, group-version parsing and content deletion
succeeded (``False`` failure conditions), and whether content or finalizers remain
(``NamespaceContentRemaining`` / ``NamespaceFinalizersRemaining``, ``True`` while objects
with finalizers hold the namespace).
"""

from __future__ import annotations

from typing import Any


def deletion_conditions(remaining: dict[str, int], finalizers: dict[str, int], now: str,
                        previous: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The conditions for ``remaining`` objects per resource and ``finalizers`` per finalizer."""
    def cond(ctype: str, status: str, reason: str, message: str) -> dict[str, Any]:
        old = next((c for c in previous or [] if c.get("type") == ctype), None)
        since = old["lastTransitionTime"] if old and old.get("status") == status and old.get("lastTransitionTime") \
            else now
        return {"type": ctype, "status": status, "lastTransitionTime": since, "reason": reason, "message": message}

    out = [
        cond("NamespaceDeletionDiscoveryFailure", "False", "ResourcesDiscovered", "All resources successfully discovered"),
        cond("NamespaceDeletionGroupVersionParsingFailure", "False", "ParsedGroupVersions",
             "All legacy kube types successfully parsed"),
        cond("NamespaceDeletionContentFailure", "False", "ContentDeleted",
             "All content successfully deleted, may be waiting on finalization"),
    ]
    if remaining:
        text = ", ".join(f"{r} has {n} resource instances" for r, n in sorted(remaining.items()))
        out.append(cond("NamespaceContentRemaining", "True", "SomeResourcesRemain", f"Some resources are remaining: {text}"))
    else:
        out.append(cond("NamespaceContentRemaining", "False", "ContentRemoved", "All content successfully removed"))
    if finalizers:
        text = ", ".join(f"{f} in {n} resource instances" for f, n in sorted(finalizers.items()))
        out.append(cond("NamespaceFinalizersRemaining", "True", "SomeFinalizersRemain",
                        f"Some content in the namespace has finalizers remaining: {text}"))
    else:
        out.append(cond("NamespaceFinalizersRemaining", "False", "ContentHasNoFinalizers",
                        "All content-preserving finalizers finished"))
    return out
