"""Kept logs: the tail of a container's output, copied into the database when it ends.

Kubernetes forgets a pod's log with the pod (the kubelet keeps it only while the pod
exists). The worker copies the last ``log_archive_bytes`` of the ``main`` container's
log when the pod reaches ``Succeeded``/``Failed`` and just before it deletes the pod of a
cancelled container; a pod the queue stops (Kueue deletes it, and its node may remove the
ended container before the end is seen) is copied while it stops too, and again at its end
when the node still has it. ``GET /v1/containers/{id}/logs`` serves that copy once the
container has finished. A run the queue preempted before the container went back in the queue
(``restart_on_preemption``) is kept apart, by its number (``container_run_log``), and served
with ``?attempt=<run>``. The cut falls on a line boundary where one exists.
"""

from __future__ import annotations

import re

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from services.api.domain.models import ContainerLog, ContainerRunLog, utcnow

#: What the kubelet answers (with 200: it has already sent its headers) for a container it no
#: longer has, e.g. one removed right after its pod was deleted and stopped
#: (``kubeGenericRuntimeManager.GetContainerLogs``), or for one whose log file it has removed
#: with the deleted pod's /var/log/pods folder (``logs.ReadLogs``): not the container's output.
_CONTAINER_GONE = re.compile(
    r"unable to retrieve container logs for [a-z]+://[0-9a-f]+"
    r'|failed to try resolving symlinks in path "/var/log/pods/[^"\n]+": lstat [^\n]+: no such file or directory'
)


def container_gone(text: str) -> bool:
    """True when ``text`` is the kubelet's answer for a container, or a log file, it no longer has."""
    return _CONTAINER_GONE.fullmatch(text.strip()) is not None


def bounded_tail(text: str, max_bytes: int) -> tuple[str, bool]:
    """The last ``max_bytes`` (UTF-8) of ``text``, cut after a newline when possible."""
    data = text.encode()
    if len(data) <= max_bytes:
        return text, False
    tail = data[-max_bytes:]
    newline = tail.find(b"\n")
    if 0 <= newline < len(tail) - 1:
        tail = tail[newline + 1 :]
    return tail.decode(errors="ignore"), True


def get(session: Session, *, container_id: str, run: int | None = None) -> ContainerLog | ContainerRunLog | None:
    """The kept log of the container's last run, or (``run``) of that earlier run."""
    if run is None:
        return session.get(ContainerLog, container_id)
    return session.get(ContainerRunLog, (container_id, run))


def keep(
    session: Session, *, container_id: str, tenancy: str, text: str, max_bytes: int, run: int | None = None
) -> ContainerLog | ContainerRunLog:
    """Store (or replace) the kept log of a container's last run, or (``run``) of that earlier
    run, bounded to ``max_bytes``."""
    kept, truncated = bounded_tail(text, max_bytes)
    row = get(session, container_id=container_id, run=run)
    if row is None:
        row = (
            ContainerLog(container_id=container_id, tenancy=tenancy, text=kept, truncated=truncated)
            if run is None
            else ContainerRunLog(container_id=container_id, run=run, tenancy=tenancy, text=kept, truncated=truncated)
        )
    else:
        row.text, row.truncated, row.captured_at = kept, truncated, utcnow()
    session.add(row)
    try:
        session.commit()
    except IntegrityError:  # another replica kept it first: theirs is as good
        session.rollback()
        existing = get(session, container_id=container_id, run=run)
        assert existing is not None
        return existing
    return row


def tail_lines(text: str, lines: int | None) -> str:
    if lines is None:
        return text
    return "".join(text.splitlines(keepends=True)[-lines:])
