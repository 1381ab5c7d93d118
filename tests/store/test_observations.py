"""Reading observations files: validation names the file, column and row."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from hairline.errors import DataError
from hairline.stats.data import ARM_A, ARM_B
from hairline.store.observations import read_observations, write_observations


def write_csv(tmp_path: Path, text: str, name: str = "obs.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_csv_with_two_arms_becomes_one_sample_per_metric(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path,
        "arm,trial,host,metric,value\n"
        "A,1,h1,cpu,10\nB,1,h2,cpu,11\nA,2,h2,cpu,10.5\nB,2,h1,cpu,11.5\n"
        "A,1,h1,mem,100\nB,1,h2,mem,101\n",
    )
    obs = read_observations(path)
    assert obs.arms == ("A", "B")
    assert obs.metrics == ("cpu", "mem")
    samples = {metric: s for metric, _, s in obs.samples()}
    cpu = samples["cpu"]
    np.testing.assert_array_equal(cpu.value, [10, 11, 10.5, 11.5])
    np.testing.assert_array_equal(cpu.arm, [ARM_A, ARM_B, ARM_A, ARM_B])
    # Hosts are coded by identity: h1 rows share a code, h2 rows another.
    assert cpu.host is not None
    assert cpu.host[0] == cpu.host[3] != cpu.host[1] == cpu.host[2]
    assert cpu.request is None


def test_baseline_arm_a_comes_first_whatever_the_row_order(tmp_path: Path) -> None:
    path = write_csv(tmp_path, "arm,metric,value\nB,cpu,2\nA,cpu,1\nC,cpu,3\n")
    obs = read_observations(path)
    assert obs.arms == ("A", "B", "C")
    candidates = [arm for _, arm, _ in obs.samples()]
    assert candidates == ["B", "C"]


def test_missing_column_is_named_with_the_columns_present(tmp_path: Path) -> None:
    path = write_csv(tmp_path, "arm,metric\nA,cpu\nB,cpu\n")
    with pytest.raises(DataError, match="missing column 'value'") as err:
        read_observations(path)
    assert err.value.hint is not None and "it has arm, metric" in err.value.hint
    assert str(path) in err.value.message


def test_single_arm_is_an_error(tmp_path: Path) -> None:
    path = write_csv(tmp_path, "arm,metric,value\nA,cpu,1\nA,cpu,2\n")
    with pytest.raises(DataError, match="single arm 'A'"):
        read_observations(path)


def test_non_numeric_value_names_row_and_line(tmp_path: Path) -> None:
    path = write_csv(tmp_path, "arm,metric,value\nA,cpu,1\nB,cpu,fast\n")
    with pytest.raises(DataError, match=r"not numeric at row 2 \(line 3\): 'fast'"):
        read_observations(path)


def test_empty_value_names_the_row(tmp_path: Path) -> None:
    path = write_csv(tmp_path, "arm,metric,value\nA,cpu,1\nB,cpu,\n")
    with pytest.raises(DataError, match=r"'value' is empty at row 2"):
        read_observations(path)


def test_unknown_suffix_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no such file"):
        read_observations(tmp_path / "nope.csv")
    path = write_csv(tmp_path, "x", name="obs.txt")
    with pytest.raises(DataError, match="unknown file type"):
        read_observations(path)


def test_parquet_round_trip_is_atomic(tmp_path: Path) -> None:
    table = pa.table(
        {
            "arm": ["A", "B"] * 3,
            "metric": ["latency"] * 6,
            "value": [1.0, 2.0, 1.5, 2.5, 1.2, 2.2],
            "t": [0.0, 0.0, 1.0, 1.0, 2.0, 2.0],
        }
    )
    path = write_observations(tmp_path / "run" / "obs.parquet", table)
    assert [p.name for p in path.parent.iterdir()] == ["obs.parquet"]
    obs = read_observations(path)
    ((metric, candidate, sample),) = list(obs.samples())
    assert (metric, candidate) == ("latency", "B")
    assert sample.t is not None
    np.testing.assert_array_equal(sample.arm_values(ARM_B), [2.0, 2.5, 2.2])


def test_non_finite_values_are_rejected_in_parquet(tmp_path: Path) -> None:
    table = pa.table({"arm": ["A", "B"], "metric": ["m", "m"], "value": [1.0, float("nan")]})
    path = write_observations(tmp_path / "obs.parquet", table)
    with pytest.raises(DataError, match=r"not finite at row 2\n"):
        read_observations(path)
