"""The cohort's pool: the Cohort ``gpucaas`` kept holding the GPUs that no tenancy is guaranteed.

A Kueue cohort's capacity is its members' nominal quotas and its own: each tenancy's
ClusterQueue brings its guarantee, so the rest of the fleet must be the Cohort's own nominal
quota, or no ClusterQueue can ever borrow it (with every guarantee 0, nothing would be
admitted). The figure (:func:`.queues.pool_of`) is a pure function of the cluster as the
controller's watches show it, the GPU nodes and the tenancies, recomputed whole at every change
and never adjusted by deltas: after a restart, or on another replica that takes over, the same
watches give the same figure.

:class:`PoolKeeper` makes the live Cohort hold it. Every node or tenancy event asks it to (a pure
comparison with what it last wrote, then nothing unless the figure moved); an event of the Cohort
itself compares the live object and puts it back when deleted or edited. Writes are serialised
and each computes the figure afresh when its turn comes, so a write never lands after a newer one
with an older figure. When the guarantees exceed the fleet it says so once per figure: a warning
in the log and a Warning Event on the Cohort (reason :data:`GUARANTEES_EXCEED_FLEET`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from core import kueue

from . import errors, kube
from .comparison import matches
from .kube import KubeClient
from .queues import GpuFlavor, Pool, build_cohort

log = logging.getLogger(__name__)

#: The Event reason on the Cohort while the tenancies are guaranteed more GPUs than the fleet has.
GUARANTEES_EXCEED_FLEET = "GuaranteesExceedFleet"

#: Posts a Warning Event on an object: (object, reason, message).
Warn = Callable[[Mapping[str, Any], str, str], None]


class PoolKeeper:
    """Keeps the Cohort at the pool the watches show; one per operator process."""

    def __init__(self, client: KubeClient, flavor: GpuFlavor, *, warn: Warn | None = None) -> None:
        self._kube = client
        self._flavor = flavor
        self._warn = warn
        self._turn = asyncio.Lock()
        #: The pool the Cohort was last made to hold; None before the first write and after a
        #: failed one (the resync then tries again).
        self.kept: Pool | None = None
        self._said: Pool | None = None
        self._failure: str | None = None

    def desired(self, pool: Pool) -> dict[str, Any]:
        return build_cohort(self._flavor, pool)

    def _wanted(self, pool: Pool, observed: Mapping[str, Any] | None, deleted: bool) -> bool:
        if deleted:
            return True
        if observed is not None:
            return not matches(self.desired(pool), observed)
        return pool != self.kept

    async def keep(
        self, current: Callable[[], Pool], *, observed: Mapping[str, Any] | None = None, deleted: bool = False
    ) -> None:
        """Make the Cohort hold ``current()`` (the pool the watches show now) when it moved since the
        last write; with ``observed`` (the Cohort as its own watch shows it), when that differs or
        was ``deleted``. A failure is logged and left to the next change or resync."""
        if not self._wanted(current(), observed, deleted):
            return
        async with self._turn:
            pool = current()  # the watches as they are now, after the write this one waited for
            if not self._wanted(pool, observed, deleted):
                return
            live = await asyncio.to_thread(self._write, pool)
            if live is not None:
                self._say(pool, live)

    def _write(self, pool: Pool) -> dict[str, Any] | None:
        desired = self.desired(pool)
        try:
            action, live = self._kube.ensure(desired)
        except (errors.KubeError, errors.NotReadyYet) as exc:  # NotReadyYet: being deleted, recreated next time
            self.kept = None
            if str(exc) != self._failure:
                log.warning(
                    "Cohort %s: its pool of %d GPUs not written (tried again): %s", kueue.COHORT, pool.gpus, exc
                )
            self._failure = str(exc)
            return None
        self.kept, self._failure = pool, None
        if action != kube.UNCHANGED:
            log.info(
                "Cohort %s %s: a pool of %d GPUs (%d on %d GPU nodes, %d guaranteed)",
                kueue.COHORT,
                action,
                pool.gpus,
                pool.fleet_gpus,
                pool.nodes,
                pool.guaranteed_gpus,
            )
        return live

    def _say(self, pool: Pool, live: Mapping[str, Any]) -> None:
        """Warn once per figure while the guarantees exceed the fleet; say when they fit again."""
        said, self._said = self._said, pool
        if pool.shortfall and pool != said:
            message = (
                f"the tenancies are guaranteed {pool.guaranteed_gpus} GPUs but the fleet has {pool.fleet_gpus} "
                f"({pool.nodes} nodes of instance type {self._flavor.name}, by their {kueue.GPU_COUNT_LABEL}): "
                f"{pool.shortfall} guaranteed GPUs cannot be given while every tenancy uses its guarantee, and "
                "the cohort's pool is 0"
            )
            log.warning("Cohort %s: %s", kueue.COHORT, message)
            if self._warn is not None:
                self._warn(live, GUARANTEES_EXCEED_FLEET, message)
        elif not pool.shortfall and said is not None and said.shortfall:
            log.info(
                "Cohort %s: the guarantees (%d GPUs) fit the fleet (%d) again",
                kueue.COHORT,
                pool.guaranteed_gpus,
                pool.fleet_gpus,
            )
