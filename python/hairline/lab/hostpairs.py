"""Host pairs: one experiment's trials side by side on several sets of hosts.

An experiment needs one host per arm for a trial (a *host pair* for two arms; the name
stays for three). On the ray backend ``[design] host_pairs`` lets it hold several such
sets at once and run one trial on each at a time, so that more test machines make an
experiment shorter (ServiceLab gets its sensitivity from many machine pairs at once)
instead of only letting more experiments run at once.

- :func:`allocate_pairs` asks the inventory for as many pairs as the file allows, and
  takes fewer when the inventory or the team's quota has fewer (never waits for more
  than one pair).
- :func:`split_pairs` cuts an allocation into its pairs (by host id, as allocated).
- :class:`TrialQueue` hands the pending trials to the pairs, lowest index first, one at
  a time per pair; :func:`run_lanes` runs one thread per pair on it. Each pair runs a
  trial's batches in lockstep exactly as a single pair does.

Each trial's rows carry its hosts' positions in the whole allocation (pair ``p``, host
``i`` of ``n`` arms: ``p * n + i``), so the analysis finds the host pair of every row
as ``host // n`` (lab/analysis.py clusters by it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hairline.errors import HostsUnavailable
from hairline.hosts.inventory import Allocation, Waiting, allocate
from hairline.hosts.similar import Requirements
from hairline.store.db import Store

__all__ = [
    "Lane",
    "TrialQueue",
    "allocate_pairs",
    "pair_of_host",
    "run_lanes",
    "split_pairs",
]


def pair_of_host(host: int, arms: int) -> int:
    """The host pair of a host's position in an experiment's allocation."""
    return host // arms


@dataclass(frozen=True)
class Lane:
    """One host pair of an experiment: its hosts, and where they start in the whole
    allocation (the position of its first host: ``pair * arms``)."""

    pair: int
    allocation: Allocation
    offset: int
    pairs: int = 1  # how many pairs the experiment has, this one among them


def split_pairs(allocation: Allocation, arms: int) -> tuple[Lane, ...]:
    """``allocation`` as consecutive pairs of ``arms`` hosts each, in its order."""
    count = len(allocation.host_ids)
    if arms < 1 or count % arms:
        raise ValueError(f"{count} hosts do not make pairs of {arms} (one host per arm)")

    def part(start: int) -> Allocation:
        stop = start + arms
        return Allocation(
            host_ids=allocation.host_ids[start:stop],
            names=allocation.names[start:stop],
            cpus=allocation.cpus[start:stop],
            facts=allocation.facts[start:stop],
            addresses=allocation.addresses[start:stop],
            regions=allocation.regions[start:stop],
        )

    pairs = count // arms
    return tuple(Lane(p, part(p * arms), p * arms, pairs) for p in range(pairs))


def allocate_pairs(
    store: Store,
    experiment_id: int,
    team: str,
    arms: int,
    most_pairs: int,
    *,
    lease_s: float,
    clock: Callable[[], float],
    backend: str,
    requirements: Requirements,
) -> Allocation | Waiting:
    """As many host pairs as ``most_pairs``, the inventory's free hosts and the team's
    quota allow, at least one: ``most_pairs`` first, then one pair fewer each time the
    inventory has too few hosts, or hosts are held, or the quota is too small. Only the
    last try (one pair) may wait or raise :class:`HostsUnavailable`. Hosts of the
    experiment beyond what the final try kept are given back by it (hosts/rows.py)."""
    for pairs in range(max(1, most_pairs), 0, -1):
        try:
            got = allocate(
                store, experiment_id, team, pairs * arms, lease_s=lease_s, clock=clock,
                backend=backend, requirements=requirements,
            )  # fmt: skip
        except HostsUnavailable:
            if pairs == 1:
                raise
            continue
        if isinstance(got, Allocation) or pairs == 1:
            return got
    raise AssertionError("unreachable: the last try returns or raises")


class TrialQueue:
    """The pending trials, handed out one at a time, lowest index first, to whichever
    pair is free; closed (nothing more handed out) when the sequential design settles or
    a pair fails. Thread-safe."""

    def __init__(self, pending: Sequence[int]) -> None:
        self._pending = sorted(pending)
        self._closed = False
        self._lock = threading.Lock()
        self.taken: dict[int, list[int]] = {}  # pair -> the trials it took, in order

    def take(self, pair: int) -> int | None:
        """The next trial for ``pair``, or None when there is none or the queue is closed."""
        with self._lock:
            if self._closed or not self._pending:
                return None
            index = self._pending.pop(0)
            self.taken.setdefault(pair, []).append(index)
            return index

    def close(self) -> None:
        with self._lock:
            self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed


def run_lanes(
    lanes: Sequence[Lane],
    queue: TrialQueue,
    work: Callable[[Lane, int], bool],
    *,
    abort: threading.Event,
) -> None:
    """Run the queue's trials on the lanes, one thread per lane. ``work(lane, index)``
    runs one trial and returns False to close the queue (the verdicts are settled).

    The first exception of any lane closes the queue: the other lanes finish the trial
    they are running and stop, and it is raised here. An interrupt of this thread (Ctrl-C)
    sets ``abort``, which ``work``'s checks are expected to honour, then waits for the
    lanes and raises the interrupt."""
    errors: list[BaseException] = []
    lock = threading.Lock()

    def lane_loop(lane: Lane) -> None:
        try:
            while (index := queue.take(lane.pair)) is not None:
                if not work(lane, index):
                    queue.close()
        except BaseException as err:  # every lane's end is reported to the caller
            queue.close()
            with lock:
                errors.append(err)

    threads = [
        threading.Thread(target=lane_loop, args=(lane,), name=f"host-pair-{lane.pair}")
        for lane in lanes
    ]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(timeout=0.5)
    except BaseException:
        queue.close()
        abort.set()
        for thread in threads:
            thread.join()
        raise
    if errors:
        raise errors[0]
