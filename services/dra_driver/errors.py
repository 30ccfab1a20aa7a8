"""Errors of the DRA driver, named by meaning; the kubelet-facing server turns them into answers.

Fabric and Kubernetes failures are the core clients' (:mod:`core.fabric_client`,
:mod:`core.kube`).
"""

from __future__ import annotations


class DraDriverError(Exception):
    """Base of every DRA driver error."""


class ClaimNotReady(DraDriverError):
    """The claim cannot be prepared yet, or not at all; the message is for the kubelet."""
