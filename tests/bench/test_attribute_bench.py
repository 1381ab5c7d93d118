"""bench/attribute/run.py end to end on tiny sizes: both fitters run in their own process
and the JSON it records in bench/RESULTS.md comes out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "attribute" / "run.py"


def test_both_fitters_report_time_memory_and_loss(tmp_path):
    out = tmp_path / "attribute.json"
    arguments = ["--rows", "3000", "--statsmodels-max-iter", "50", "--json", "--out", str(out)]
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    summary = json.loads(result.stdout)
    assert json.loads(out.read_text()) == summary
    assert (summary["rows"], summary["regressors"], summary["q"]) == (3000, 8, 0.99)
    assert [f["fitter"] for f in summary["fitters"]] == ["hairline", "statsmodels"]
    for fitter in summary["fitters"]:
        assert fitter["seconds"] > 0
        assert fitter["peak_rss_mib"] >= fitter["data_rss_mib"] > 0
        assert len(fitter["coef"]) == 8
    # The interior point's optimum is never worse than IRLS, here stopped early.
    assert summary["loss_ratio"] <= 1 + 1e-9
