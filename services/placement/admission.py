"""Kueue's partition admission check, decided: may a Workload whose GPUs Kueue reserved start now?

Pure domain (no I/O). Kueue counts GPUs; a 2-, 4- or 8-GPU pod also needs a whole free NVLink
partition of its size on one node. A Workload passes (``Ready``) when every one of its pods
fits, best fit first, on the fleet's free GPUs less what was promised to the Workloads that
passed before it and whose pods no node has been counted for yet (:class:`Promise`). Otherwise:

* ``Pending`` (its quota kept) when it is within its tenancy's guarantee (its ClusterQueue
  borrows nothing): that quota is its own, and giving it back would only let borrowers take the
  GPUs it waits for. It *holds* the free GPUs of the partition nearest to free for each of its
  pods (:func:`holds`), so that smaller work decided after it does not keep that partition from
  ever freeing (a reservation, as batch schedulers make for their largest waiting job). When no
  GPUs being freed would give it its partitions, it *takes one back* (:func:`reclaim`): the
  partition whose other GPUs are all held by work it may preempt (pods of a ClusterQueue that
  borrows, or of its own ClusterQueue at a lower priority: what Kueue itself may preempt for it),
  the lowest priority and the fewest GPUs first. Kueue's own preemption frees quota wherever its
  victims run; this frees the very partition the guaranteed work needs;
* ``Pending`` too while GPUs are being freed (pods ending, GPUs in the firmware check between
  tenants) that would give it its partitions once free: the partition it needs may be theirs, as
  when Kueue preempted pods for it. GPUs freeing elsewhere (a node that would still lack a whole
  partition of its size) do not keep it waiting with its quota;
* ``Retry`` otherwise (it borrows): Kueue gives its quota back and queues it again after
  ``requeueAfterSeconds``, so that work that fits runs meanwhile instead of waiting behind it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from core.topology import GPU_COUNT, HGX_H100_PARTITIONS, cover_size
from services.placement.errors import InvalidRequest
from services.placement.extender import pod_gpu_count
from services.placement.fit import mask_of
from services.placement.fleet import FleetIndex, Freeing, NodeFree

CheckState = Literal["Pending", "Ready", "Retry"]

#: Retry delays, by how many times Kueue has queued the Workload again for this check: short at
#: first (a partition frees as soon as a pod ends), at most a minute.
RETRY_DELAYS_S = (5, 10, 20, 40, 60)


@dataclass(frozen=True, slots=True)
class Promise:
    """GPUs counted as taken for a Workload that passed, until the watcher counts its pods."""

    workload: str  # its uid
    node: str
    mask: int
    made_at: float  # monotonic seconds


@dataclass(frozen=True, slots=True)
class Verdict:
    state: CheckState
    message: str
    requeue_after_s: int | None = None
    promises: tuple[Promise, ...] = ()
    #: the Workloads (uids) to preempt for it: their GPUs complete the partitions it holds
    victims: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Occupant:
    """A running Workload's GPUs on one node, as the check may take them back for a guarantee."""

    workload: str  # its uid
    node: str
    mask: int  # the GPUs its pod holds on the node
    queue: str  # the ClusterQueue whose quota it holds
    priority: int
    gpus: int  # all the GPUs of the Workload (its eviction gives back that much quota)


@dataclass(frozen=True, slots=True)
class Claimant:
    """Who a guaranteed Workload may preempt: pods of its own ClusterQueue at a lower priority,
    and pods of the ClusterQueues still borrowing (``borrowed``: GPUs held beyond their nominal
    quota), as Kueue's ``withinClusterQueue: LowerPriority`` and ``reclaimWithinCohort: Any``."""

    queue: str
    priority: int = 0
    borrowed: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Asked:
    """A Workload waiting for the check's answer, as read from its object."""

    uid: str
    namespace: str
    name: str
    pod_sizes: tuple[int, ...]  # GPUs of each of its pods (0: none)
    retries: int = 0  # status.admissionChecks[].retryCount


def pod_sizes(workload: Mapping[str, Any], resource: str) -> tuple[int, ...]:
    """The GPUs of each pod of a Workload (``spec.podSets``: ``count`` pods of one template)."""
    sizes: list[int] = []
    for pod_set in (workload.get("spec") or {}).get("podSets") or []:
        template = pod_set.get("template") or {}
        try:
            gpus = pod_gpu_count({"spec": template.get("spec") or {}}, resource)
        except InvalidRequest:
            gpus = GPU_COUNT + 1  # no node can hold it: it never passes
        count = pod_set.get("count", 1)
        sizes.extend([gpus] * (count if isinstance(count, int) and count > 0 else 1))
    return tuple(sizes)


def _index(nodes: Iterable[NodeFree], promises: Iterable[Promise], *, healthy: bool = False) -> FleetIndex:
    index = FleetIndex()
    for node in nodes:
        if healthy:
            node = NodeFree(node.name, node.healthy_mask, node.healthy_mask, node.usable, node.reason)
        index.set_node(node)
    for promise in promises:
        known = index.node(promise.node)
        if known is not None:  # a node gone or grown busy since: what is left of the promise
            index.take(promise.node, promise.mask & known.free_mask)
    return index


def _place(index: FleetIndex, sizes: Sequence[int]) -> list[tuple[str, int]] | None:
    """Each size on the index, largest first, best fit, taking its GPUs; None when one does not fit."""
    placed: list[tuple[str, int]] = []
    for size in sorted((s for s in sizes if s > 0), reverse=True):
        if size > GPU_COUNT:
            return None
        placement = index.best(size)
        if placement is None:
            return None
        mask = mask_of(placement.gpus)
        index.take(placement.node, mask)
        placed.append((placement.node, mask))
    return placed


def holds(
    uid: str, nodes: Sequence[NodeFree], promises: Iterable[Promise], sizes: Sequence[int], now: float
) -> tuple[Promise, ...]:
    """For each size (largest first), the free GPUs of the partition of its covering size that has
    the most of them free (healthy, on a usable node, none promised; ties: node name, then the
    partition's table order): held for the Workload ``uid`` that waits for a whole one."""
    index = _index(nodes, promises)
    held: list[Promise] = []
    for size in sorted((s for s in sizes if 0 < s <= GPU_COUNT), reverse=True):
        cover = cover_size(size)
        best: tuple[int, str, int] | None = None  # (-free GPUs, node, mask)
        for name in sorted(index.names()):
            node = index.node(name)
            if node is None or not node.usable:
                continue
            for part in HGX_H100_PARTITIONS:
                whole = mask_of(part.gpus)
                if part.size != cover or whole & ~node.healthy_mask:
                    continue
                free = whole & node.free_mask
                if free and (best is None or (-free.bit_count(), name) < best[:2]):
                    best = (-free.bit_count(), name, free)
        if best is None:
            continue
        _, name, free = best
        index.take(name, free)
        held.append(Promise(uid, name, free, now))
    return tuple(held)


def _soon(nodes: Sequence[NodeFree], freeing: Mapping[str, Freeing]) -> list[NodeFree]:
    """The nodes as they will be once the GPUs being freed (those known by id) are free."""
    return [
        NodeFree(n.name, n.free_mask | (freeing[n.name].mask & n.healthy_mask), n.healthy_mask, n.usable, n.reason)
        if n.name in freeing
        else n
        for n in nodes
    ]


def _freed_soon(
    nodes: Sequence[NodeFree], freeing: Mapping[str, Freeing], promises: Sequence[Promise], sizes: Sequence[int]
) -> list[str]:
    """The nodes whose GPUs being freed would let every size fit (each node's free GPUs plus its
    known freeing ones, best fit; or, for GPUs of ending pods no report places, a node whose free
    and freeing GPUs reach the largest size); empty: what frees cannot help."""
    if not any(f.mask or f.unplaced for f in freeing.values()):
        return []
    soon = _soon(nodes, freeing)
    index = _index(soon, promises)
    placed = _place(index, sizes)
    if placed is not None:
        return sorted({node for node, _ in placed} & set(freeing))
    largest = max(sizes)
    return sorted(
        n.name
        for n in soon
        if n.usable
        and freeing.get(n.name, Freeing()).unplaced
        and n.free_mask.bit_count() + freeing[n.name].unplaced >= largest
    )


def reclaim(
    nodes: Sequence[NodeFree],
    freeing: Mapping[str, Freeing],
    promises: Iterable[Promise],
    sizes: Sequence[int],
    occupants: Iterable[Occupant],
    claimant: Claimant,
) -> tuple[list[tuple[str, int]], tuple[str, ...]] | None:
    """For each size (largest first), the whole partition of its covering size to take back:
    its GPUs are free, being freed, or held by Workloads ``claimant`` may preempt (see
    :class:`Claimant`; a ClusterQueue stops giving victims once it no longer borrows), none
    promised to other work; the cheapest first: the victims' highest priority, then their GPUs,
    their number, the node's name and NVIDIA's table order. Returns the partitions (node,
    mask) and the victims, or None when some size has no such partition (nothing is taken)."""
    index = _index(_soon(nodes, freeing), promises)
    by_node: dict[str, list[Occupant]] = {}
    for occupant in occupants:
        by_node.setdefault(occupant.node, []).append(occupant)
    left = dict(claimant.borrowed)  # what each borrowing ClusterQueue may still give
    victims: dict[str, Occupant] = {}
    taken: list[tuple[str, int]] = []
    for size in sorted((s for s in sizes if 0 < s <= GPU_COUNT), reverse=True):
        cover = cover_size(size)
        best: tuple[tuple[int, int, int, str, int], str, int, list[Occupant]] | None = None
        for name in sorted(index.names()):
            node = index.node(name)
            if node is None or not node.usable:
                continue
            # GPUs of victims already chosen are as good as free for the next sizes
            chosen = 0
            for occupant in by_node.get(name, ()):
                if occupant.workload in victims:
                    chosen |= occupant.mask
            available = node.free_mask | (chosen & node.healthy_mask & ~_taken_on(taken, name))
            for order, part in enumerate(HGX_H100_PARTITIONS):
                whole = mask_of(part.gpus)
                if part.size != cover or whole & ~node.healthy_mask:
                    continue
                need = whole & ~available  # none: free already (or by a victim taken for a larger pod)
                holders = [o for o in by_node.get(name, ()) if o.mask & need and o.workload not in victims]
                covered = 0
                for holder in holders:
                    covered |= holder.mask
                if covered & need != need or not _may_preempt(holders, claimant, left):
                    continue  # a GPU held by work it may not preempt (or by nothing known)
                cost = (
                    max((h.priority for h in holders), default=-(2**31)),
                    sum(h.gpus for h in holders),
                    len(holders),
                    name,
                    order,
                )
                if best is None or cost < best[0]:
                    best = (cost, name, whole, holders)
        if best is None:
            return None
        _, name, whole, holders = best
        for holder in holders:
            victims[holder.workload] = holder
            if holder.queue != claimant.queue:
                left[holder.queue] = left.get(holder.queue, 0) - holder.gpus
        index.take(name, whole & index.node(name).free_mask)  # type: ignore[union-attr]  # listed above
        taken.append((name, whole))
    return taken, tuple(sorted(victims))


def _taken_on(taken: Sequence[tuple[str, int]], node: str) -> int:
    mask = 0
    for name, whole in taken:
        if name == node:
            mask |= whole
    return mask


def _may_preempt(holders: Sequence[Occupant], claimant: Claimant, left: Mapping[str, int]) -> bool:
    """Whether the claimant may preempt every one of ``holders`` (``left``: the GPUs each other
    ClusterQueue still borrows; one that borrows gives victims until it no longer does)."""
    giving = dict(left)
    for holder in sorted(holders, key=lambda h: h.gpus):
        if holder.queue == claimant.queue:
            if holder.priority >= claimant.priority:
                return False
        elif giving.get(holder.queue, 0) <= 0:
            return False
        else:
            giving[holder.queue] -= holder.gpus
    return True


def _sizes_text(sizes: Sequence[int]) -> str:
    counted = sorted({s for s in sizes if s > 0}, reverse=True)
    return " and ".join(f"{sizes.count(s)} x {s}-GPU" if sizes.count(s) > 1 else f"{s}-GPU" for s in counted)


def decide(
    asked: Asked,
    nodes: Sequence[NodeFree],
    promises: Iterable[Promise],
    *,
    freeing: Mapping[str, Freeing],
    now: float,
    guaranteed: bool = False,
    claimant: Claimant | None = None,
    occupants: Iterable[Occupant] = (),
) -> Verdict:
    """The check's answer for one Workload (see the module docstring); ``freeing``: per node,
    what frees by itself soon; ``guaranteed``: its ClusterQueue borrows nothing, so its quota is
    its tenancy's guarantee; ``claimant`` and ``occupants``: whom it may preempt, and where the
    running Workloads' GPUs are (none given: it takes nothing back)."""
    promises = list(promises)
    sizes = [s for s in asked.pod_sizes if s > 0]
    if not sizes:
        return Verdict("Ready", "needs no GPUs")
    what = _sizes_text(sizes) + (" partition" if len(sizes) == 1 else " partitions")
    placed = _place(_index(nodes, promises), sizes)
    if placed is not None:
        where = ", ".join(sorted({node for node, _ in placed}))
        return Verdict(
            "Ready",
            f"whole free NVLink {what} on {where}",
            promises=tuple(Promise(asked.uid, node, mask, now) for node, mask in placed),
        )
    if _place(_index(nodes, (), healthy=True), sizes) is None:
        delay = RETRY_DELAYS_S[-1]
        return Verdict("Retry", f"no node's healthy GPUs can hold the NVLink {what}; queued again in {delay} s", delay)
    if guaranteed:
        if _freed_soon(nodes, freeing, promises, sizes):
            return Verdict(
                "Pending",
                f"within the tenancy's guarantee: keeping its quota while GPUs are being freed for the NVLink {what} "
                "(held for it)",
                promises=holds(asked.uid, _soon(nodes, freeing), promises, sizes, now),
            )
        taken = reclaim(nodes, freeing, promises, sizes, occupants, claimant) if claimant is not None else None
        if taken is not None:
            parts, victims = taken
            where = ", ".join(sorted({node for node, _ in parts}))
            return Verdict(
                "Pending",
                f"within the tenancy's guarantee: taking back the NVLink {what} on {where} from "
                f"{len(victims)} Workload(s) running on borrowed GPUs or at a lower priority (preempted; held for it)",
                promises=tuple(Promise(asked.uid, node, mask, now) for node, mask in parts),
                victims=victims,
            )
        return Verdict(
            "Pending",
            f"within the tenancy's guarantee: keeping its quota until a whole NVLink {what} frees "
            "(the free GPUs of the partition nearest to free are held for it)",
            promises=holds(asked.uid, nodes, promises, sizes, now),
        )
    wait_on = _freed_soon(nodes, freeing, promises, sizes)
    if wait_on:
        count = sum(freeing[n].mask.bit_count() + freeing[n].unplaced for n in wait_on)
        return Verdict(
            "Pending", f"waiting for {count} GPUs being freed on {', '.join(wait_on)}, for the NVLink {what}"
        )
    delay = RETRY_DELAYS_S[min(asked.retries, len(RETRY_DELAYS_S) - 1)]
    return Verdict(
        "Retry",
        f"no whole free NVLink {what} now (the GPUs are in use or promised); queued again in {delay} s",
        delay,
    )
