"""Short runs of the sample service through the lab, for benchmarks that need many of them.

The example's experiment file (examples/sample-service/experiment.toml) at a fixed 2,000
requests/s with 1 s batches and a 0.5 s warm-up: about 5 s a trial on a 2-vCPU VM.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "sample-service"
HAIRLINE = [sys.executable, "-c", "from hairline.cli import main; main()"]
METRIC = "cpu_ns_per_request"

__all__ = ["HAIRLINE", "METRIC", "ROOT", "cpu_verdict", "run_json", "short_experiment"]


def short_experiment(
    folder: Path, *, trials: int, regress: float | None = None, model: str | None = None
) -> Path:
    """The example's file in ``folder``, short and at a fixed rate; arm B with
    ``--regress-cpu regress`` (None: no change), the analysis with ``model`` if given."""
    for item in ("service.toml", "trace.jsonl"):
        if not (folder / item).exists():
            shutil.copy(EXAMPLE / item, folder / item)
    text = (EXAMPLE / "experiment.toml").read_text()
    for old, new in (
        ("duration_s = 4", "rate_per_s = 2000\nduration_s = 1"),
        ("warmup_duration_s = 1.5", "warmup_duration_s = 0.5"),
        ("trials = 7", f"trials = {trials}"),
        ('args = ["--regress-cpu", "0.05"]',
         f'args = ["--regress-cpu", "{regress}"]' if regress else "args = []"),
    ):  # fmt: skip
        if old not in text:
            raise SystemExit(f"{EXAMPLE / 'experiment.toml'} no longer has {old!r}")
        text = text.replace(old, new)
    if model is not None:
        text = text.replace('model = "adaptive"', f'model = "{model}"')
    path = folder / f"e-{regress or 0}-{trials}-{model or 'file'}.toml"
    path.write_text(text)
    return path


def run_json(command: str, path: Path, home: Path) -> tuple[dict[str, Any], float]:
    """``hairline run`` or ``aa`` of ``path``: its JSON report and the wall time (s)."""
    report = home / "last.json"
    home.mkdir(parents=True, exist_ok=True)
    report.unlink(missing_ok=True)
    started = time.monotonic()
    done = subprocess.run([*HAIRLINE, command, str(path), "--home", str(home), "--json",
                           str(report)], capture_output=True, text=True)  # fmt: skip
    if not report.exists():
        raise SystemExit(f"{path.name}: no report: {(done.stderr or done.stdout)[-1500:]}")
    return json.loads(report.read_text()), time.monotonic() - started


def cpu_verdict(report: dict[str, Any]) -> dict[str, Any]:
    """The report's cpu_ns_per_request entry of its analysis."""
    metrics = (report.get("analysis") or {}).get("metrics", [])
    return next(m for m in metrics if m["metric"] == METRIC)
