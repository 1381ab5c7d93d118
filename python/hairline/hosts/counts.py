"""How many hosts of each class are free: what allocation ranks the classes by.

Counting the free hosts of every class is the one scan of the whole inventory an
allocation needs (one grouped query over the class columns; 5 ms of PostgreSQL's time at
10,000 hosts on a quiet machine, 25 ms on a busy one). Each process reads it at most once
every :data:`COUNTS_TTL_S` (5 s) and counts its own allocations in at once. Counts older than
that are still used, up to :data:`STALE_MAX_S`, while a thread reads them again
(stale-while-revalidate): with the read in the allocation, one allocation in twelve waited
for it, which set the p99 of an allocation (bench/control). The counts only rank the
classes, and taking the hosts is checked against the rows themselves, so a choice that
finds its hosts gone is made again from counts read afresh (``hosts/inventory.py``).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import ColumnElement, Connection, and_, func, select

from hairline.hosts.similar import GROUP_FACTS, Group
from hairline.store.db import Store
from hairline.store.models import Host

__all__ = [
    "COUNTS_TTL_S",
    "STALE_MAX_S",
    "ClassCounts",
    "cached_counts",
    "class_counts",
    "count_taken",
    "forget_counts",
]

# How old the free hosts per class may be when an allocation ranks the classes by them.
# Every processor reads them, so the scan's cost grows with the processors: at 1 s, eight
# processors on PostgreSQL with 10,000 hosts spent a fifth to a third of the database's
# time on it (6 ms a scan quiet, 15-33 ms with the machine busy; bench/control). At 5 s
# it is a twentieth; the ranking barely moves in 5 s, and a choice whose class has run
# out meanwhile is made again from counts read afresh.
COUNTS_TTL_S = 5.0
# Older counts than COUNTS_TTL_S are used while a thread reads them again, up to this age.
STALE_MAX_S = 30.0


@dataclass(frozen=True)
class ClassCounts:
    read_at_s: float  # time.monotonic()
    pool: int  # enabled hosts of the backend, free or not
    groups: tuple[Group, ...]  # free healthy hosts per group


# Per process, by (database URL, backend).
_counts: dict[tuple[str, str], ClassCounts] = {}


# Keys whose counts a thread is reading now.
_refreshing: set[tuple[str, str]] = set()
_refreshing_lock = threading.Lock()


def cached_counts(
    store: Store, backend: str, *, refresh: Callable[[], object] | None = None
) -> ClassCounts | None:
    """The counts read less than COUNTS_TTL_S ago, if any; with ``refresh``, counts up to
    STALE_MAX_S old too, while ``refresh`` (which reads and caches them) runs on a thread."""
    key = (store.url, backend)
    cached = _counts.get(key)
    if cached is None:
        return None
    age_s = time.monotonic() - cached.read_at_s
    if age_s < COUNTS_TTL_S:
        return cached
    if refresh is None or age_s >= STALE_MAX_S:
        return None
    with _refreshing_lock:
        if key not in _refreshing:
            _refreshing.add(key)
            threading.Thread(target=_refresh, args=(key, refresh), daemon=True).start()
    return cached


def _refresh(key: tuple[str, str], refresh: Callable[[], object]) -> None:
    try:
        refresh()
    except Exception:  # the database went away: the next allocation reads them itself
        _counts.pop(key, None)
    finally:
        with _refreshing_lock:
            _refreshing.discard(key)


def class_counts(
    connection: Connection,
    store: Store,
    backend: str,
    *,
    enabled: Sequence[ColumnElement[bool]],
    free: ColumnElement[bool],
    fresh: bool,
) -> ClassCounts:
    """The backend's ``enabled`` hosts and, per group, those ``free`` and healthy, at most
    COUNTS_TTL_S old (read now when ``fresh``); no facts JSON is parsed."""
    cached = None if fresh else cached_counts(store, backend)
    if cached is not None:
        return cached
    columns = [getattr(Host, f) for f in GROUP_FACTS]
    rows = connection.execute(
        select(*columns, func.count(), func.count().filter(and_(Host.healthy.is_(True), free)))
        .where(*enabled)
        .group_by(*columns)
    ).all()
    counts = ClassCounts(
        read_at_s=time.monotonic(),
        pool=sum(int(row[-2]) for row in rows),
        groups=tuple(
            Group(**{f: str(v) for f, v in zip(GROUP_FACTS, row[:-2], strict=True)},
                  free=int(row[-1]))
            for row in rows
            if row[-1]
        ),
    )  # fmt: skip
    _counts[(store.url, backend)] = counts
    return counts


def count_taken(store: Store, backend: str, slots: Sequence[Group]) -> None:
    """Count this process's own allocation in its cached counts at once."""
    key = (store.url, backend)
    cached = _counts.get(key)
    if cached is None:
        return
    # By identity: the slots are groups of these very counts (or of counts since replaced,
    # which then match nothing here), and hashing a frozen dataclass hashes every field,
    # which for the hundreds of groups of an inventory cost more than the choice itself.
    taken: dict[int, int] = {}
    for g in slots:
        taken[id(g)] = taken.get(id(g), 0) + 1
    groups = list(cached.groups)
    for i, g in enumerate(groups):
        n = taken.get(id(g))
        if n is not None:
            groups[i] = dataclasses.replace(g, free=g.free - n)
    _counts[key] = dataclasses.replace(cached, groups=tuple(g for g in groups if g.free > 0))


def forget_counts() -> None:
    """Drop the cached counts (hosts were added or changed outside allocation)."""
    _counts.clear()
