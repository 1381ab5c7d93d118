"""The stored record of an analysis: what reports and listings read back."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa

from hairline.lab.analysis import AnalysisOptions, analyze
from hairline.lab.results import load_analysis, save_analysis, stored_history
from hairline.store.observations import read_observations, write_observations


def analysis(tmp_path: Path):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(5)
    rows: dict[str, list[object]] = {"trial": [], "arm": [], "metric": [], "value": []}
    for trial in range(6):
        for arm in ("A", "B"):
            for metric, value in (
                ("cpu_ns_per_request", 1000 * (1.05 if arm == "B" else 1) * rng.normal(1, 0.01)),
                ("error_rate", 0.0),  # a constant: NaN effects and p-values
            ):
                rows["trial"].append(trial)
                rows["arm"].append(arm)
                rows["metric"].append(metric)
                rows["value"].append(value)
    observations = read_observations(write_observations(tmp_path / "o.parquet", pa.table(rows)))
    return analyze(observations, AnalysisOptions())


def same(a: object, b: object) -> bool:
    """Equal, with NaN equal to NaN (a stored NaN is JSON's null)."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if hasattr(a, "__dataclass_fields__"):
        return type(a) is type(b) and all(
            same(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__
        )
    return a == b


def test_an_analysis_reads_back_as_it_was_stored_nan_included(tmp_path: Path) -> None:
    original = analysis(tmp_path)
    assert any(math.isnan(r.comparison.effect_rel) for r in original.results)
    save_analysis(tmp_path, original, history_ids=[3, 4])
    assert same(load_analysis(tmp_path), original)
    assert stored_history(tmp_path) == [3, 4]


def test_no_stored_analysis_is_none_and_an_older_format_too(tmp_path: Path) -> None:
    assert load_analysis(tmp_path) is None
    (tmp_path / "verdicts.json").write_text(json.dumps({"version": 0, "analysis": {}}))
    assert load_analysis(tmp_path) is None


def test_a_three_sided_analysis_reads_back_with_each_arms_baseline(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    rows: dict[str, list[object]] = {"trial": [], "arm": [], "metric": [], "value": []}
    for trial in range(5):
        for arm, cost in (("production", 1.0), ("parent", 1.02), ("change", 1.05)):
            rows["trial"].append(trial)
            rows["arm"].append(arm)
            rows["metric"].append("cpu_ns_per_request")
            rows["value"].append(1000 * cost * rng.normal(1, 0.005))
    observations = read_observations(write_observations(tmp_path / "o.parquet", pa.table(rows)))
    original = analyze(
        observations, AnalysisOptions(), baseline="production", baselines={"change": "parent"}
    )
    save_analysis(tmp_path, original, history_ids=[])
    loaded = load_analysis(tmp_path)
    assert same(loaded, original)
    assert loaded is not None and loaded.deciding == ("change",)
    assert loaded.comparisons == (("parent", "production"), ("change", "parent"))


def test_an_analysis_stored_before_arm_baselines_reads_as_every_arm_against_the_baseline(
    tmp_path: Path,
) -> None:
    save_analysis(tmp_path, analysis(tmp_path), history_ids=[])
    payload = json.loads((tmp_path / "verdicts.json").read_text())
    del payload["analysis"]["deciding"]
    for result in payload["analysis"]["results"]:
        del result["baseline"]
    (tmp_path / "verdicts.json").write_text(json.dumps(payload))
    loaded = load_analysis(tmp_path)
    assert loaded is not None and loaded.deciding == () and not loaded.chained
    assert {r.baseline for r in loaded.results} == {"A"}
    assert loaded.decides("B") and loaded.regressions
