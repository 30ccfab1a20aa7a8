"""Errors of GPU leases, named by meaning.

Lease conflicts and illegal transitions are the core's (:mod:`core.lease_store`,
:mod:`core.lease_states`): the API moves leases too.
"""

from __future__ import annotations


class GpuLeaseError(Exception):
    """Base of every GPU-lease error of this service."""


class BadGoldenTable(GpuLeaseError, ValueError):
    """The golden firmware table (``firmware_golden_file``) is not what the check can use."""
