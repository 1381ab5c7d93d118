"""The kernel's CPU list format ("0-3,8,10-11"), read once for every place that meets it:
``/sys/devices/system/cpu/online``, an agent's ``--cpus``, the inventory's stored lists."""

from __future__ import annotations

__all__ = ["parse_cpu_list"]


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """The CPUs a list names, sorted, each once; () for an empty list. Pure.

    Raises ValueError for anything that is not a list of numbers and ranges (``"a"``,
    ``"3-"``, ``"-1"``) or a range that runs backwards (``"5-2"``)."""
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        first, dash, last = part.partition("-")
        low, high = int(first), int(last) if dash else int(first)
        if low < 0 or high < low:
            raise ValueError(f"{part!r} is not a CPU or a range of CPUs")
        cpus.update(range(low, high + 1))
    return tuple(sorted(cpus))
