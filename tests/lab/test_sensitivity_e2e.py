"""`hairline sensitivity` on the sample service: an A/A run of the file measures its noise,
and the table and JSON give the smallest change found against trials and minutes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from experiment_files import write_experiment
from test_lab_e2e import assert_nothing_left, hairline

from schema_check import check_schema


@pytest.mark.shares_cpus
def test_sensitivity_runs_an_aa_and_reads_it_again_with_other_metrics(
    tmp_path: Path, engine_path: Path
) -> None:
    """False failure: about 1e-5: a 3-trial A/A of the sample service at 300/s must finish
    within 300 s (it takes about 15 s); no figure it measures is asserted, only that the
    noise is not zero and the MDE shrinks with trials, which holds for any noise, a
    neighbour's included (shares_cpus)."""
    home = tmp_path / "home"
    experiment = write_experiment(tmp_path / "e", tag="sens")
    out = tmp_path / "sens.json"
    done = hairline("sensitivity", str(experiment.path), "--trials", "3", "--json", str(out),
                    home=home, engine=engine_path)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "noise per trial" in done.stdout and "cpu_ns_per_request" in done.stdout
    measured = json.loads(out.read_text())
    check_schema("sensitivity", measured)
    (cpu,) = measured["metrics"]
    assert cpu["metric"] == "cpu_ns_per_request" and cpu["aa_trials"] == 3
    assert cpu["sd_per_trial_rel"] > 0 and measured["trial_s"] > 0
    mdes = [point["mde_rel"] for point in cpu["mde_rel"]]
    assert mdes == sorted(mdes, reverse=True)
    assert_nothing_left(home)

    again = hairline("sensitivity", str(experiment.path), "--from-experiment",
                     str(measured["experiment_id"]), "--metric", "latency_p99_us",
                     "--json", "-", home=home, engine=engine_path)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["metrics"][0]["metric"] == "latency_p99_us"
    check_schema("sensitivity", json.loads(again.stdout))

    unknown = hairline("sensitivity", str(experiment.path), "--from-experiment",
                       str(measured["experiment_id"]), "--metric", "nope",
                       home=home, engine=engine_path)  # fmt: skip
    assert unknown.returncode == 2 and "nope: not measured" in unknown.stderr
    assert "cpu_ns_per_request" in unknown.stderr  # the hint lists what was
    missing = hairline("sensitivity", str(experiment.path), "--from-experiment", "99",
                       home=home, engine=engine_path)  # fmt: skip
    assert missing.returncode == 2 and "experiment 99 does not exist" in missing.stderr
