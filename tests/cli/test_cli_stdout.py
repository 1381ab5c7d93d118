"""``--json FILE``: the file, and the table on stdout. (``--json -``, the JSON alone on stdout
and no file named ``-``, is checked for every output flag of every command, these included,
by tests/cli/test_cli_outputs.py: ``analyze --json -`` once wrote a file named ``-``, mode
0600, and printed its table on stdout.)"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from click.testing import CliRunner

from hairline.cli import main
from schema_check import check_schema


def observations(path: Path) -> Path:
    """Two arms, four trials of one metric, B 5% costlier (seeded)."""
    rng = np.random.default_rng(7)
    rows = [
        {"trial": t, "arm": arm, "host": h, "metric": "cpu_ns_per_request",
         "value": float(rng.normal(1000.0 * (1.05 if arm == "B" else 1.0), 5.0))}
        for t in range(4) for h, arm in enumerate("AB")
    ]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_json_to_a_file_says_where_and_the_table_stays_on_stdout(tmp_path: Path) -> None:
    obs = observations(tmp_path / "obs.parquet")
    out = tmp_path / "verdicts.json"
    result = CliRunner().invoke(main, ["analyze", str(obs), "--json", str(out)])
    assert result.exit_code == 1, result.output
    assert f"wrote {out}" in result.stdout and "cpu_ns_per_request" in result.stdout
    assert json.loads(out.read_text())["regression"] is True
    check_schema("analysis", json.loads(out.read_text()))
