"""Fragmentation of a pool: free devices that no waiting job of the pool can use, because
they lie on nodes in pieces smaller than any job asks for per node.

For one pool (the README's "Queue time and fragmentation" says the same):

    free(n)     devices of the pool on node n that no job holds; 0 on a node that cannot
                run jobs (down, drained, in maintenance)
    R           the per-node device counts (`--gres`, tres_per_node) of the pool's waiting
                jobs: pending with Slurm's reason Resources, Priority or None
    fragmented  sum of free(n) over the nodes where free(n) < min(R); 0 when R is empty
    ratio       fragmented / sum of free(n); 0 when nothing is free

After "Beware of Fragmentation" (Weng et al., USENIX ATC'23, on the Alibaba openb trace):
their fragment of a node for a task is the free GPU capacity that task cannot use there,
averaged over the workload's mix of tasks. Here the workload is the queue itself and a
device counts only when *no* waiting job fits its node, so every fragmented device is one
the scheduler cannot give to anyone waiting now.

With no job waiting the figure is 0, not a guess from a "typical" request: fragmentation
costs something only while it delays jobs, an idle device is already visible as free, and
one definition keeps the alert, the dashboard and the brute-force check
(benchmarks/fragmentation_check.py) in agreement.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Fragmentation:
    free: int  # devices free on nodes that can run jobs
    fragmented: int  # of those, on nodes where no waiting job fits
    smallest_request: int | None  # the smallest per-node request waiting; None: no job waits

    @property
    def ratio(self) -> float:
        return self.fragmented / self.free if self.free else 0.0


def fragmentation(free_per_node: Iterable[int], requests: Iterable[int]) -> Fragmentation:
    """One pool from its nodes' free devices and its waiting jobs' per-node requests.

    >>> fragmentation([1, 1, 3, 0], [2, 8])  # the 1s cannot serve a 2-device request
    Fragmentation(free=5, fragmented=2, smallest_request=2)
    >>> fragmentation([1, 1], []).fragmented  # nothing waits: nothing is lost
    0
    """
    free = [f for f in free_per_node if f > 0]
    wanted = [r for r in requests if r > 0]
    smallest = min(wanted) if wanted else None
    fragmented = sum(f for f in free if f < smallest) if smallest is not None else 0
    return Fragmentation(free=sum(free), fragmented=fragmented, smallest_request=smallest)


def by_pool(pools: Iterable[str], free: Mapping[str, Iterable[int]],
            requests: Mapping[str, Iterable[int]]) -> dict[str, Fragmentation]:
    """Every pool of `pools`, one missing from `free` or `requests` counting as empty."""
    return {p: fragmentation(free.get(p, ()), requests.get(p, ())) for p in pools}
