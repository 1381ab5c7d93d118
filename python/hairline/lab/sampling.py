"""What is sampled of the arms' stacks while a batch measures (their memory is a
collector's: collect/memory.py).

Stacks (``[service.profile]``): each arm is sampled the same way, by its own ``perf
record`` on its host's CPUs, started just before the load and stopped just after it, so
whatever sampling costs, both arms pay it. A local arm's perf runs here; an arm that
samples itself (:class:`SamplesOnItsNode`: a Ray arm) runs the same window on its node and
sends back what it sampled. What comes back is a row per function and arm
(CPU nanoseconds per request, self and inclusive: :mod:`hairline.profile.functions`), a
``fn.samples`` row marking the batch as profiled, the folded stacks in the runs folder (for
the report's flame graph), and, when an arm has no profile, why (the experiment runs on
without function metrics).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from hairline.arms.node_profile import arm_perf
from hairline.config.profiling import ProfileConfig
from hairline.profile.functions import function_shares
from hairline.profile.perf import Sampled

__all__ = [
    "SAMPLES_METRIC",
    "BatchProfiles",
    "SamplesOnItsNode",
    "StackSampler",
    "profile_batch",
    "write_folded",
]

#: One row per profiled batch and arm: the samples its profile holds.
SAMPLES_METRIC = "fn.samples"


class StackSampler(Protocol):
    """One arm's sampling over one window (:class:`~hairline.profile.perf.ArmPerf`, here
    or on the arm's node). Only :meth:`stop` returns anything; none raises for perf's own
    failures (a lost node may raise its own exception: the batch is lost anyway)."""

    def start(self) -> None: ...
    def interrupt(self) -> None: ...
    def stop(self) -> Sampled: ...
    def kill(self) -> None: ...


@runtime_checkable
class SamplesOnItsNode(Protocol):
    """An arm whose processes are on another machine: it samples them there
    (arms/remote.py's ``RemoteArm``)."""

    def stack_sampler(self, config: ProfileConfig, name: str) -> StackSampler: ...


class _Profiled(Protocol):
    @property
    def cpus(self) -> tuple[int, ...] | None: ...
    def pids(self) -> list[int]: ...


def _sampler(arm: _Profiled, config: ProfileConfig, workdir: Path, name: str) -> StackSampler:
    if isinstance(arm, SamplesOnItsNode):
        return arm.stack_sampler(config, name)
    return arm_perf(config, cpus=arm.cpus, pids=arm.pids, workdir=workdir, name=name)


@dataclass
class BatchProfiles:
    """The arms' profiles of one batch once the window closed."""

    sampled: dict[str, Sampled] = field(default_factory=dict)

    def rows(self, cpu_ns_per_request: Mapping[str, float]) -> Iterator[tuple[str, str, float]]:
        """(arm, metric, value) of every sampled function of every profiled arm."""
        for arm, result in sorted(self.sampled.items()):
            if result.profile is None or arm not in cpu_ns_per_request:
                continue
            yield arm, SAMPLES_METRIC, float(result.samples)
            shares = function_shares(result.profile)
            for metric, value in shares.rows(cpu_ns_per_request[arm]):
                yield arm, metric, value

    def record(self) -> dict[str, object]:
        """What the batch's record keeps: samples per arm, and why an arm has none."""
        return {
            arm: {
                "samples": r.samples,
                "others": r.others,
                **({"on": r.host} if r.host else {}),
                **({"why": r.reason} if r.reason else {}),
            }
            for arm, r in sorted(self.sampled.items())
        }


def write_folded(result: Sampled, path: Path) -> None:
    """The profile as folded stacks (``frame;frame;leaf COUNT``, root first), the format
    flame graph tools read; nothing when there is no profile."""
    if result.profile is None:
        return
    lines = [
        ";".join(f.name for f in frames) + f" {int(count)}"
        for (_, frames), count in sorted(result.profile.stacks.items(), key=lambda kv: -kv[1])
    ]
    path.write_text("\n".join(lines) + "\n")


@contextlib.contextmanager
def profile_batch(
    config: ProfileConfig | None,
    arms: Mapping[str, _Profiled],
    *,
    workdir: Path,
    tag: str,
) -> Iterator[BatchProfiles]:
    """Sample ``arms`` while the block runs; the profiles are in the yielded object once
    it ends. With ``config`` None nothing is sampled. Every perf started is stopped on every
    way out, an exception's included (a Ray node's too: its agent kills it, and a node
    whose agent is gone took its perfs with it)."""
    out = BatchProfiles()
    if config is None:
        yield out
        return
    samplers = {name: _sampler(arm, config, workdir, f"{tag}-{name}") for name, arm in arms.items()}
    stopped = False
    try:
        for sampler in samplers.values():
            sampler.start()
        yield out
        for sampler in samplers.values():
            sampler.interrupt()
        # Each arm's `perf script` side by side (here, or on the arms' nodes): DWARF
        # unwinding took 3.5 s for 13,000 samples on this VM, one after the other the batch
        # waited for both.
        with ThreadPoolExecutor(max_workers=len(samplers) or 1) as pool:
            done = {name: pool.submit(sampler.stop) for name, sampler in samplers.items()}
        for name, future in done.items():
            out.sampled[name] = future.result()
            write_folded(out.sampled[name], workdir / f"{tag}-{name}.folded")
        stopped = True
    finally:
        if not stopped:
            for sampler in samplers.values():
                sampler.kill()
