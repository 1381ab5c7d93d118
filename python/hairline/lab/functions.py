"""Which functions changed: each function's CPU per request compared between the arms.

Every profiled batch gave, per arm, each function's self and inclusive CPU nanoseconds per
request (lab/sampling.py). Each function is compared like a metric: its values per batch go
through the paired t on trial means (``paired-t-none``, so the error term is the trials',
and the fully balanced design's host swap cancels host effects within each trial). Not the
trimmed t the lab prefers from 5 trials for the service's metrics: at 10 trials it trims 4
of them, and in simulation (tests/lab/test_functions.py) it found a 1% function made 20%
slower in 82 of 100 runs where the paired t found it in 100, at the same A/A rate. Then:

- **Multiple testing.** Hundreds of functions are hundreds of tests: their p-values are
  adjusted by Benjamini-Hochberg, and a function is a finding when its adjusted p is below
  the false discovery rate (``fdr``, default 5%).
- **Pooling.** A function below ``min_share`` of the arm's CPU in both arms is not tested
  on its own (a test that could only add false discoveries); its self cost goes into one
  ``(other functions)`` row, which is.
- **New and gone.** A function with no sample in any batch of one arm and at least
  ``min_share`` in the other is reported as new (or gone) with its cost, not tested.
- **Cost shifts.** A regression matched by an improvement of a caller, a callee or a
  sibling (inlining, code moved, a function renamed) whose sum did not change (the same
  test on the pair's summed self cost is not significant at the FDR) is a shift, not a
  regression.
"""

from __future__ import annotations

import dataclasses
import itertools
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hairline.collect.summary import CPU_PER_REQUEST
from hairline.config.profiling import ProfileConfig
from hairline.lab.sampling import SAMPLES_METRIC
from hairline.profile.functions import OTHER, SELF, TOTAL, function_metric, parse_function_metric
from hairline.stats import DegenerateDataWarning, MetricSample
from hairline.stats.models import run_model
from hairline.stats.verdict import adjust_p_values
from hairline.store.observations import Observations

__all__ = ["FunctionAnalysis", "FunctionChange", "analyze_functions", "neighbours_of"]

FunctionVerdict = Literal["regression", "improvement", "shift", "new", "gone", "no change"]
_CPU = CPU_PER_REQUEST.name


@dataclass(frozen=True)
class FunctionChange:
    """One function (self or inclusive) compared between a candidate and its baseline."""

    function: str
    kind: str  # "self" or "total" (inclusive)
    mean_a_ns: float
    mean_b_ns: float
    effect_ns: float
    effect_rel: float
    ci_ns: tuple[float, float]
    p_value: float
    p_adjusted: float
    #: The function's share of the baseline arm's CPU (the candidate's for a new one).
    share: float
    verdict: FunctionVerdict
    #: For a shift: the functions its cost moved to or from.
    shift_with: tuple[str, ...] = ()

    @property
    def flagged(self) -> bool:
        return self.verdict != "no change"


@dataclass(frozen=True)
class FunctionAnalysis:
    """The functions of one candidate against its baseline."""

    candidate: str
    baseline: str
    fdr: float
    min_share: float
    trials: int
    samples_per_batch: float
    changes: tuple[FunctionChange, ...]
    #: Functions below min_share in both arms, pooled into "(other functions)".
    pooled: int = 0
    notes: tuple[str, ...] = field(default=())

    @property
    def flagged(self) -> tuple[FunctionChange, ...]:
        """The findings, largest absolute effect first."""
        found = [c for c in self.changes if c.flagged]
        return tuple(sorted(found, key=lambda c: -abs(c.effect_ns)))


def neighbours_of(folded: Iterable[Path]) -> dict[str, frozenset[str]]:
    """Each function's callers and callees in the stacks of ``folded`` files (``frame;
    frame;leaf COUNT``, root first, as lab/sampling.py writes them); a file that cannot be
    read is skipped."""
    out: dict[str, set[str]] = {}
    for path in folded:
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            stack = line.rpartition(" ")[0]
            for caller, callee in itertools.pairwise(stack.split(";")):
                if caller != callee:
                    out.setdefault(caller, set()).add(callee)
                    out.setdefault(callee, set()).add(caller)
    return {k: frozenset(v) for k, v in out.items()}


def _related(a: str, b: str, neighbours: Mapping[str, frozenset[str]]) -> bool:
    """Caller, callee, or sibling (a common neighbour) in the stacks."""
    na, nb = neighbours.get(a, frozenset()), neighbours.get(b, frozenset())
    return b in na or a in nb or bool(na & nb)


Cell = tuple[str, str, str]  # (trial, batch, arm), as the observations' text


def _cell(row: Mapping[str, object]) -> Cell:
    return str(row["trial"]), str(row["batch"]), str(row["arm"])


@dataclass(frozen=True)
class _Cells:
    """The (trial, batch) pairs in which both arms were profiled, each arm's host there."""

    keys: list[tuple[str, str]]
    host: dict[Cell, str]


def _profiled_cells(table: pa.Table, base: str, cand: str) -> _Cells:
    rows = table.filter(pc.equal(table.column("metric"), SAMPLES_METRIC)).to_pylist()
    seen: dict[tuple[str, str], set[str]] = {}
    host: dict[Cell, str] = {}
    for r in rows:
        trial, batch, arm = _cell(r)
        seen.setdefault((trial, batch), set()).add(arm)
        host[(trial, batch, arm)] = str(r.get("host", ""))
    keys = sorted(k for k, arms in seen.items() if {base, cand} <= arms)
    return _Cells(keys, host)


def _values(
    table: pa.Table, arms: tuple[str, str], keys: list[tuple[str, str]]
) -> dict[str, np.ndarray]:
    """metric -> values in cell order (the baseline's cells, then the candidate's), 0
    where the function had no sample."""
    index = {(t, b, a): i for i, (a, (t, b)) in enumerate(itertools.product(arms, keys))}
    out: dict[str, np.ndarray] = {}
    for r in table.to_pylist():
        at = index.get(_cell(r))
        if at is None:
            continue
        values = out.setdefault(str(r["metric"]), np.zeros(len(index)))
        values[at] += float(r["value"])
    # A batch writes a function's inclusive row only where it differs from the self row
    # (the function called something there): where it is missing, inclusive is self.
    for metric, values in out.items():
        parsed = parse_function_metric(metric)
        if parsed is not None and parsed[0] == TOTAL:
            own = out.get(function_metric(SELF, parsed[1]))
            if own is not None:
                np.maximum(values, own, out=values)
    return out


def analyze_functions(
    observations: Observations,
    comparisons: Mapping[str, str],
    config: ProfileConfig,
    *,
    neighbours: Mapping[str, frozenset[str]] | None = None,
    seed: int = 0,
) -> list[FunctionAnalysis]:
    """The function analysis of every candidate (``comparisons``: candidate -> baseline)
    whose batches were profiled in both arms in at least two trials."""
    table = observations.table
    fn_rows = table.filter(
        pc.or_(
            pc.starts_with(table.column("metric"), "fn."),
            pc.equal(table.column("metric"), _CPU),
        )
    )
    rng = np.random.default_rng(seed)
    out = []
    for cand, base in comparisons.items():
        part = fn_rows.filter(pc.is_in(fn_rows.column("arm"), pa.array([base, cand])))
        cells = _profiled_cells(part, base, cand)
        trials = len({t for t, _ in cells.keys})
        if trials < 2:
            continue
        out.append(_compare(part, base, cand, cells, config, neighbours or {}, rng))
    return out


def _compare(
    table: pa.Table,
    base: str,
    cand: str,
    cells: _Cells,
    config: ProfileConfig,
    neighbours: Mapping[str, frozenset[str]],
    rng: np.random.Generator,
) -> FunctionAnalysis:
    keys = cells.keys
    n = len(keys)
    values = _values(table, (base, cand), keys)
    cpu = values.get(_CPU, np.ones(2 * n))
    # Integer codes (only equality matters): the trial, the batch (each cell its own), the
    # host the arm ran on in that batch.
    trial_of = {t: i for i, t in enumerate(sorted({t for t, _ in keys}))}
    trial = np.array([trial_of[t] for t, _ in keys] * 2)
    batch = np.array(list(range(n)) * 2)
    host_of: dict[str, int] = {}
    host = np.array(
        [host_of.setdefault(cells.host.get((t, b, a), ""), len(host_of))
         for a in (base, cand) for t, b in keys]
    )  # fmt: skip
    arm = np.array([0] * n + [1] * n, dtype=np.int8)
    model = "paired-t-none"
    samples = values.get(SAMPLES_METRIC, np.zeros(2 * n))

    def test(v: np.ndarray) -> tuple[float, float, tuple[float, float], float, float, float]:
        sample = MetricSample.from_arrays(v, arm, trial=trial, batch=batch, host=host)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateDataWarning)
            c = run_model(model, sample, rng=rng, alpha=config.fdr)
        return c.mean_a, c.mean_b, c.ci_abs, c.p_value, c.effect_abs, c.effect_rel

    tested: list[tuple[str, str, np.ndarray, float]] = []
    fixed: list[FunctionChange] = []
    pooled_self = np.zeros(2 * n)
    pooled = 0
    for metric, v in sorted(values.items()):
        parsed = parse_function_metric(metric)
        if parsed is None:
            continue
        kind, name = parsed
        share_a = float(np.mean(v[:n] / np.maximum(cpu[:n], 1e-12)))
        share_b = float(np.mean(v[n:] / np.maximum(cpu[n:], 1e-12)))
        if max(share_a, share_b) < config.min_share:
            if kind == SELF:
                pooled_self += v
                pooled += 1
            continue
        a_none, b_none = not np.any(v[:n] > 0), not np.any(v[n:] > 0)
        if a_none or b_none:
            mean_a, mean_b = float(np.mean(v[:n])), float(np.mean(v[n:]))
            fixed.append(FunctionChange(
                function=name, kind=kind, mean_a_ns=mean_a, mean_b_ns=mean_b,
                effect_ns=mean_b - mean_a, effect_rel=float("nan"),
                ci_ns=(float("nan"), float("nan")), p_value=float("nan"),
                p_adjusted=float("nan"), share=share_b if a_none else share_a,
                verdict="new" if a_none else "gone",
            ))  # fmt: skip
            continue
        tested.append((kind, name, v, share_a))
    if pooled:
        share = float(np.mean(pooled_self[:n] / np.maximum(cpu[:n], 1e-12)))
        tested.append((SELF, OTHER, pooled_self, share))

    results = [test(v) for _, _, v, _ in tested]
    p = np.array([r[3] for r in results], dtype=np.float64)
    adjusted = adjust_p_values(p, method="bh") if len(p) else p
    changes: list[FunctionChange] = []
    for (kind, name, _, share), r, p_adj in zip(tested, results, adjusted, strict=True):
        mean_a, mean_b, ci, p_value, effect, rel = r
        found = bool(np.isfinite(p_adj) and p_adj < config.fdr)
        verdict: FunctionVerdict = (
            ("regression" if effect > 0 else "improvement") if found else "no change"
        )
        changes.append(FunctionChange(
            function=name, kind=kind, mean_a_ns=mean_a, mean_b_ns=mean_b, effect_ns=effect,
            effect_rel=rel, ci_ns=(float(ci[0]), float(ci[1])), p_value=p_value,
            p_adjusted=float(p_adj), share=share, verdict=verdict,
        ))  # fmt: skip
    changes = _shifts(changes + fixed, values, neighbours, lambda v: test(v)[3], config.fdr)
    return FunctionAnalysis(
        candidate=cand,
        baseline=base,
        fdr=config.fdr,
        min_share=config.min_share,
        trials=len(trial_of),
        samples_per_batch=float(np.mean(samples)) if len(samples) else 0.0,
        changes=tuple(changes),
        pooled=pooled,
    )


def _shifts(
    changes: list[FunctionChange],
    values: Mapping[str, np.ndarray],
    neighbours: Mapping[str, frozenset[str]],
    p_value_of: Callable[[np.ndarray], float],
    fdr: float,
) -> list[FunctionChange]:
    """Mark regressions whose cost an improved (or gone) related function gave up, the
    pair's summed self cost unchanged, as shifts."""
    ups = [c for c in changes if c.kind == SELF and c.verdict in ("regression", "new")]
    downs = [c for c in changes if c.kind == SELF and c.verdict in ("improvement", "gone")]
    partners: dict[str, set[str]] = {}
    for up in ups:
        for down in downs:
            if not _related(up.function, down.function, neighbours):
                continue
            summed = (
                values[function_metric(SELF, up.function)]
                + values[function_metric(SELF, down.function)]
            )
            p_value = p_value_of(summed)
            if not (np.isfinite(p_value) and p_value < fdr):
                partners.setdefault(up.function, set()).add(down.function)
                partners.setdefault(down.function, set()).add(up.function)
    if not partners:
        return changes
    return [
        dataclasses.replace(c, verdict="shift", shift_with=tuple(sorted(partners[c.function])))
        if c.kind == SELF and c.function in partners
        else c
        for c in changes
    ]
