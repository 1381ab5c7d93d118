"""Host pairs in a report: which pairs an experiment's trials ran on side by side, how
many trials each ran, and each deciding verdict clustered by host pair (lab/hostpairs.py,
lab/analysis.py). Pure: read from the report's hosts and analysis.
"""

from __future__ import annotations

from collections.abc import Sequence

from hairline.lab.analysis import Analysis, MetricAnalysis
from hairline.report.context.jsontypes import HostPairJson
from hairline.report.context.model import HostPair, HostReport
from hairline.report.context.text import comparison_text

__all__ = ["by_host_pair_text", "host_pair_notes", "host_pairs", "host_pairs_json"]


def host_pairs(
    analysis: Analysis | None, hosts: Sequence[HostReport], arms: int
) -> tuple[HostPair, ...]:
    """The pairs of an analysis whose trials ran on several pairs; () on one pair. A host
    replaced mid-experiment is listed beside the one it replaced."""
    if analysis is None or not analysis.host_pair_trials:
        return ()
    names: dict[int, list[str]] = {}
    for h in sorted(hosts, key=lambda h: h.host):
        found = names.setdefault(h.host // max(1, arms), [])
        if (h.name or f"host {h.host}") not in found:
            found.append(h.name or f"host {h.host}")
    return tuple(
        HostPair(pair=p, hosts=tuple(names.get(p, ())), trials=n)
        for p, n in enumerate(analysis.host_pair_trials)
    )


def by_host_pair_text(result: MetricAnalysis) -> str | None:
    """``clustered by host pair (2 pairs): +0.41% [-12.3%, +13.1%]``, or None on one pair."""
    c = result.by_host_pair
    if c is None:
        return None
    clusters = c.details.get("n_clusters", float("nan"))
    pairs = f"{clusters:.0f} pairs" if clusters == clusters else "pairs"
    if result.verdict.rule.kind == "relative":
        lo, hi = c.ci_rel
        shown = f"{_pct(c.effect_rel)} [{_pct(lo)}, {_pct(hi)}]"
    else:
        lo, hi = c.ci_abs
        shown = f"{c.effect_abs:+.4g} [{lo:+.4g}, {hi:+.4g}]"
    return f"clustered by host pair ({pairs}): {shown}"


def _pct(x: float) -> str:
    return "n/a" if x != x else f"{x * 100:+.2f}%"


def host_pair_notes(analysis: Analysis | None, pairs: Sequence[HostPair]) -> tuple[str, ...]:
    """What every renderer says of host pairs: the pairs with their hosts and trials, and
    each deciding verdict's interval with the host pair as the cluster (wide with few
    pairs: a t quantile with pairs - 1 degrees of freedom)."""
    if analysis is None or not pairs:
        return ()
    listed = "; ".join(
        f"pair {p.pair + 1} ({' + '.join(p.hosts) or 'hosts unknown'}): "
        f"{p.trials} trial{'s' if p.trials != 1 else ''}"
        for p in pairs
    )
    notes = [f"trials ran side by side on {len(pairs)} host pairs: {listed}"]
    clustered = []
    for r in analysis.results:
        text = by_host_pair_text(r)
        if text is None or not analysis.decides(r.candidate):
            continue
        name = r.metric + (f" ({comparison_text(r)})" if analysis.chained else "")
        clustered.append(f"{name} {text.split(': ', 1)[1]}")
    if clustered:
        notes.append(
            f"with the host pair as the cluster ({len(pairs)} pairs; wide with few pairs): "
            + "; ".join(clustered)
            + ". The verdicts' intervals take trials as the units: each trial's arms ran "
            "on one pair, swapping hosts, so a pair's own effect cancels in its trials"
        )
    return tuple(notes)


def host_pairs_json(pairs: Sequence[HostPair]) -> list[HostPairJson]:
    return [{"pair": p.pair, "hosts": list(p.hosts), "trials": p.trials} for p in pairs]
