"""Activations and holders as the HTTP API shows and accepts them: the holder check, the
JSON views of a record (as :mod:`core.fabric_messages` types), and Fabric Manager's errors
turned into the service's HTTP errors (``services.fabric.errors``)."""

from __future__ import annotations

from core import fabric_messages as fm
from services.fabric.bookkeeping import Activation
from services.fabric.errors import Conflict, InvalidRequest, NotFound, Unavailable, Unsupported
from services.fabric.fabric_manager.interface import PartitionConflict, PartitionUnsupported, UnknownPartition

# the holder of an activation made by an admin (caasctl): kept by ``sync``, released by the admin
ADMIN_HOLDER_PREFIX = "admin:partition-"
MAX_HOLDER_LEN = fm.MAX_HOLDER


def check_holder(holder: object) -> None:
    if not isinstance(holder, str) or not holder.strip():
        raise InvalidRequest("holder: a non-empty string is required")
    if len(holder) > MAX_HOLDER_LEN or any(c in holder for c in "\n\r\x00"):
        raise InvalidRequest(f"holder: at most {MAX_HOLDER_LEN} characters, no control characters")


def describe_holder(rec: Activation) -> str:
    return f"{rec.holder} (pod {rec.pod})" if rec.pod else rec.holder


def activation_view(a: Activation) -> fm.ActivationRecord:
    return {
        "holder": a.holder,
        "gpus": list(a.gpus),
        "partition_ids": list(a.partition_ids),
        "pod": a.pod,
        "since": a.since.isoformat(),
        "releasing": a.releasing,
        "lost": a.lost,
        "lost_at": a.lost_at.isoformat() if a.lost_at else None,
    }


def result_view(a: Activation) -> fm.ActivationResult:
    return {"holder": a.holder, "gpus": list(a.gpus), "partition_ids": list(a.partition_ids), "nvlink": a.nvlink}


def translate(exc: Exception, holder: str) -> Exception:
    """A Fabric Manager error met while activating for ``holder``, as the service's HTTP error."""
    if isinstance(exc, Unavailable):
        return exc
    if isinstance(exc, PartitionUnsupported):
        return Unsupported(str(exc))
    if isinstance(exc, PartitionConflict):
        return Conflict(f"Fabric Manager refused for {holder}: {exc}")
    if isinstance(exc, UnknownPartition):
        return NotFound(str(exc))
    return Unavailable(f"Fabric Manager error: {exc}")
