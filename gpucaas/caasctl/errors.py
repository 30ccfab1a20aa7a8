"""caasctl's one error type: a failure reported on one line (exit code 1)."""

from __future__ import annotations


class CaasctlError(Exception):
    """A failure to report on one line (exit code 1)."""
