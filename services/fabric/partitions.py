"""Partitions follow allocations: the fabric service's domain logic.

:class:`PartitionService` joins Fabric Manager (any ``FabricManager``
implementation) and the activation records (``bookkeeping``). It is the one object
the process (``main``) and the HTTP server (``server``) hold; each of its jobs lives
in a module of its own:

- ``connection``: the shared state (Fabric Manager, the records, the host layout,
  the status, the lock) and the one way of calling Fabric Manager;
- ``queries``: partitions, topology, health, the records, the layout check;
- ``activation``: ``activate(holder, gpus)``;
- ``release``: ``release(holder)``, ``sync(live, grace)``, rollback of a
  half-done activation;
- ``replay``: ``replay()``, ``reconcile()``, ``fabric_reset(reason)`` after restarts;
- ``eviction``: the admin's ``admin_activate``/``admin_deactivate`` (caasctl);
- ``views``: the holder check and the JSON views; ``status``: :class:`FabricStatus`.

Consistency: one lock serialises every change, so two racing allocations are
decided one after the other -- exactly one wins. A record is written before
Fabric Manager is asked and removed only after deactivation; a multi-partition
activation that fails half-way is rolled back before the error is returned, and
if even the rollback cannot reach Fabric Manager the record is kept as
``releasing`` so ``reconcile`` finishes it. Nothing is left half-activated.
"""

from __future__ import annotations

from services.fabric.eviction import EvictionMixin
from services.fabric.replay import ReplayMixin


class PartitionService(EvictionMixin, ReplayMixin):
    """Activation bookkeeping on top of Fabric Manager. Thread-safe."""


__all__ = ["PartitionService"]
