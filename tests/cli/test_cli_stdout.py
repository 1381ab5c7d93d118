"""``--json -`` means stdout: the JSON alone there (the tables go to stderr), and no file
named ``-`` (a regression found by hand: ``analyze --json -`` wrote one, mode 0600, and
printed its table on stdout)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
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


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["analyze", "{obs}", "--json", "-"], id="analyze"),
        pytest.param(["plan", "--endpoint", "1", "--threshold", "20%", "--json", "-"], id="plan"),
    ],
)
def test_json_to_stdout_is_the_json_alone_and_no_file_named_dash(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    obs = observations(tmp_path / "obs.parquet")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, [a.format(obs=obs) for a in args])
    assert result.exit_code in (0, 1), result.output + str(result.exception)
    assert isinstance(json.loads(result.stdout), dict)
    check_schema({"analyze": "analysis", "plan": "plan"}[args[0]], json.loads(result.stdout))
    assert not (tmp_path / "-").exists(), os.listdir(tmp_path)
    assert "wrote" not in result.stdout


def test_json_to_a_file_says_where_and_the_table_stays_on_stdout(tmp_path: Path) -> None:
    obs = observations(tmp_path / "obs.parquet")
    out = tmp_path / "verdicts.json"
    result = CliRunner().invoke(main, ["analyze", str(obs), "--json", str(out)])
    assert result.exit_code == 1, result.output
    assert f"wrote {out}" in result.stdout and "cpu_ns_per_request" in result.stdout
    assert json.loads(out.read_text())["regression"] is True
    check_schema("analysis", json.loads(out.read_text()))
