"""This machine's CPUs as local hosts (pure): how ``hairline run`` on one machine cuts the
CPUs this process may use into hosts, one per arm, and which CPUs the engine gets.

- "split" (the default): hosts of ``cpus_per_host`` CPUs each, one arm a host; with three
  or more CPUs one is kept for the engine, else the engine runs beside host 0 (the fully
  balanced design's swap cancels that host effect within each trial).
- "duet": every arm on the same CPU set and the engine on the last CPU, so that whatever
  slows a CPU slows every arm alike ([hosts] local_layout = "duet", docs/hosts.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hairline.errors import HostsUnavailable

__all__ = ["Layout", "duet_layout", "local_host_names", "local_layout"]


@dataclass(frozen=True)
class Layout:
    hosts: tuple[tuple[int, ...], ...]
    engine_cpus: tuple[int, ...]
    # "duet": every host is the same CPU set (the arms take turns on it).
    duet: bool = False


def local_layout(
    cpus: Sequence[int], *, cpus_per_host: int | None = None, duet_arms: int | None = None
) -> Layout:
    """Cut ``cpus`` into hosts, keeping one CPU (and any remainder) for the engine when
    there are three or more. ``duet_arms``: instead, ``duet_arms`` hosts that are one and
    the same CPU set (``cpus_per_host`` CPUs, by default all but the engine's), the engine
    on the last CPU (duet_layout)."""
    if duet_arms is not None:
        return duet_layout(cpus, arms=duet_arms, cpus_per_host=cpus_per_host)
    ordered = sorted(set(cpus))
    engine = ordered[-1:] if len(ordered) >= 3 else []
    rest = ordered[: len(ordered) - len(engine)]
    size = cpus_per_host or max(1, len(rest) // 2)
    if size > len(rest):
        raise HostsUnavailable(
            f"{size} CPUs per host but only {len(rest)} CPUs for hosts",
            hint="use a smaller --cpus-per-host",
        )
    count = len(rest) // size
    hosts = tuple(tuple(rest[i * size : (i + 1) * size]) for i in range(count))
    leftover = rest[count * size :]
    return Layout(hosts=hosts, engine_cpus=tuple(sorted([*leftover, *engine])))


def duet_layout(cpus: Sequence[int], *, arms: int, cpus_per_host: int | None = None) -> Layout:
    """Every arm on the same CPU set, the engine on the last CPU (Bulej et al., "Duet
    Benchmarking", 2020): whatever slows a CPU (the hypervisor, an interrupt, a cache
    another guest shares) then slows every arm alike and cancels in their difference.

    Measured on a 2-vCPU VM (bench/RESULTS.md, issue #30): nginx A/A over 30 trials read
    +/-0.28% with both arms on one CPU against +/-1.5 to 2.9% with one arm a CPU, and the
    calibration's 1 s A/A steps 0.24-0.71% against 2-4%. Pure."""
    ordered = sorted(set(cpus))
    if len(ordered) < 2:
        raise HostsUnavailable(
            f"a duet needs 2 CPUs (one for the arms, one for the engine); this process may "
            f"use {len(ordered)}",
            hint='use [hosts] local_layout = "split", or run on a machine with 2 CPUs or more',
        )
    engine, rest = ordered[-1:], ordered[:-1]
    size = cpus_per_host or len(rest)
    if size > len(rest):
        raise HostsUnavailable(
            f"{size} CPUs per host but only {len(rest)} CPUs beside the engine's",
            hint="use a smaller --cpus-per-host",
        )
    shared = tuple(rest[:size])
    return Layout(
        hosts=(shared,) * max(arms, 2),
        engine_cpus=tuple(sorted([*rest[size:], *engine])),
        duet=True,
    )


def local_host_names(machine: str, layout: Layout) -> dict[str, tuple[int, ...]]:
    """Each local host's name and CPUs: ``machine/cpu0`` or ``machine/cpu0-3``; in a duet
    the hosts share their CPUs and are told apart by a letter, ``machine/cpu0:a``."""
    names = {}
    for index, cpus in enumerate(layout.hosts):
        span = f"{cpus[0]}" if len(cpus) == 1 else f"{cpus[0]}-{cpus[-1]}"
        slot = f":{chr(ord('a') + index)}" if layout.duet else ""
        names[f"{machine}/cpu{span}{slot}"] = cpus
    return names
