"""The experiment's trace re-mixed to the endpoints a diff reaches, in their shares of the
modified code's cost, with ``trace/shape.py``'s mix (what ``hairline trace filter --mix``
does), and the reason kept as a :class:`~hairline.config.suggest.SuggestedMix`.

An endpoint of the profile is found in the trace by its label, or, for a profile that
writes ``GET /search`` where the trace's label is ``/search``, by its path. Endpoints the
trace does not hold are left out and named.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np

from hairline.config.suggest import SuggestedEndpoint, SuggestedFunction, SuggestedMix
from hairline.errors import DataError
from hairline.suggest.score import DiffImpact
from hairline.trace.format import Json, read_trace, write_trace
from hairline.trace.shape import MixResult, MixWeight, derived_header, mix_trace

__all__ = ["mix_weights", "remix"]


def _glob_literal(label: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in label)


def mix_weights(diff: DiffImpact, labels: set[str]) -> tuple[list[MixWeight], list[str]]:
    """The ``--mix`` weights for the trace's ``labels``, and the endpoints not found."""
    weights: list[MixWeight] = []
    missing: list[str] = []
    for share in diff.endpoints:
        label = share.endpoint
        if label not in labels:
            method, _, path = label.partition(" ")
            label = path if method.isupper() and path in labels else ""
        if not label:
            missing.append(share.endpoint)
            continue
        weight = Fraction(share.share).limit_denominator(1_000_000)
        weights.append(MixWeight(_glob_literal(label), weight, f"{label}={float(weight):g}"))
    return weights, missing


def remix(
    trace: Path,
    diff: DiffImpact,
    *,
    out: Path,
    base: str,
    head: str,
    count: int | None = None,
    seed: int = 0,
) -> tuple[MixResult, SuggestedMix]:
    """Write ``out``: ``trace`` re-mixed to the endpoints of ``diff``; the mix and why."""
    parsed = read_trace(trace)
    labels = {r.label for r in parsed.requests}
    weights, missing = mix_weights(diff, labels)
    if not weights:
        raise DataError(
            f"none of the endpoints the change reaches ({', '.join(missing)}) is in {trace}",
            hint="record a trace that holds them, or check that the profile's endpoint "
            "names are the trace's labels (`hairline trace stats`)",
        )
    if count is None:
        wanted = {w.pattern for w in weights}
        count = sum(1 for r in parsed.requests if _glob_literal(r.label) in wanted)
    result = mix_trace(parsed.requests, weights, count=count, rng=np.random.default_rng(seed))
    step: dict[str, Json] = {
        "op": "suggest",
        "base": base,
        "head": head,
        "mix": [w.text for w in weights],
        "count": count,
        "seed": seed,
    }
    write_trace(out, derived_header(parsed.header, step), result.requests)
    by_pattern = {g.pattern: g.chosen for g in result.groups}
    why = SuggestedMix(
        base=base,
        head=head,
        cost=diff.cost,
        share=diff.share,
        unit=diff.unit,
        functions=[
            SuggestedFunction(
                name=f.function.name,
                change=f.function.change_text,
                cost=f.cost,
                share=f.share(diff.total),
                old_name=f.function.old_name
                if f.function.old_name not in (None, f.function.name)
                else None,
            )
            for f in diff.matched
        ],
        endpoints=[
            SuggestedEndpoint(
                endpoint=w.text.rpartition("=")[0],
                share=float(w.weight) / float(sum(x.weight for x in weights)),
                requests=by_pattern.get(w.pattern, 0),
            )
            for w in weights
        ],
        missing=missing,
        trace=str(trace),
    )
    return result, why
