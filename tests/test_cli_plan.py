"""`hairline plan`: trials per design from variance components or A/A observations."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from click.testing import CliRunner

from hairline.cli import main
from schema_check import check_schema


def test_plan_from_table1_orders_designs_and_writes_json(tmp_path: Path) -> None:
    """False failure: none: the plans come from seeded simulations, the same on every run."""
    out = tmp_path / "plan.json"
    result = CliRunner().invoke(
        main, ["plan", "--endpoint", "1", "--threshold", "0.05", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    plans = _plan(out)["by_design"]
    # Perflab section 4: fully balanced has by far the least variance, unbalanced the most.
    assert plans[0]["design"] == "fully-balanced"
    assert plans[-1]["design"] == "unbalanced"
    assert plans[0]["trials"] < plans[-1]["trials"]
    # Planned by simulating the verdict: a true regression of twice the threshold (the
    # default --effect) is flagged with the asked power, one trial fewer is not.
    assert all(p["achieved_power"] >= 0.8 > p["below"] for p in plans)
    assert all(p["effect"] == 0.1 and p["threshold"] == 0.05 for p in plans)
    assert _plan(out)["effect"] == "0.1"
    assert "a regression of exactly the threshold is flagged at most" in result.output


def test_plan_from_aa_observations(tmp_path: Path) -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The plan is a seeded
    simulation too; 1 to 20 trials around a few is a wide range."""
    rng = np.random.default_rng(7)
    rows = ["arm,trial,metric,value"]
    for trial in range(12):
        level = 100 * (1 + rng.normal(0, 0.01))
        for arm in ("A", "B"):
            for value in level * (1 + rng.normal(0, 0.02, size=50)):
                rows.append(f"{arm},{trial},cpu,{value:.4f}")
    path = tmp_path / "aa.csv"
    path.write_text("\n".join(rows) + "\n")
    out = tmp_path / "plan.json"
    result = CliRunner().invoke(
        main, ["plan", "--aa", str(path), "--threshold", "1%", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    (metric,) = _plan(out)["metrics"]
    assert metric["metric"] == "cpu" and metric["aa_trials"] == 12
    # Per-trial relative effects spread about 0.3-0.5%: a 1% threshold needs a few trials.
    assert 1 <= metric["trials"]["trials"] <= 20


def test_plan_without_a_source_or_with_a_bad_threshold_exits_2() -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["plan", "--threshold", "1%"])
    assert result.exit_code == 2 and "exactly one source" in result.output
    result = runner.invoke(main, ["plan", "--endpoint", "1", "--threshold", "lots"])
    assert result.exit_code == 2 and "'lots' is not a threshold" in result.output
    result = runner.invoke(main, ["plan", "--components", "request=1", "--threshold", "0.1"])
    assert result.exit_code == 2 and "missing host" in result.output
    no_mu = "request=1,host=0.1,request_batch=0.1,host_batch=0.1,noise=0.1"
    result = runner.invoke(main, ["plan", "--components", no_mu, "--threshold", "1%"])
    assert result.exit_code == 2 and "needs the mean of A" in result.output
    # Table 1's mu is 0.06 in standardised units: 1% of it is hopeless, and says so.
    result = runner.invoke(main, ["plan", "--endpoint", "1", "--threshold", "1%"])
    assert result.exit_code == 2 and "raise the threshold" in result.output


def test_plan_asks_about_a_regression_larger_than_the_threshold(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "plan.json"
    result = runner.invoke(
        main,
        ["plan", "--endpoint", "1", "--threshold", "0.05", "--effect", "0.075", "--json", str(out)],
    )
    assert result.exit_code == 0, result.output
    closer = {p["design"]: p["trials"] for p in _plan(out)["by_design"]}
    result = runner.invoke(
        main, ["plan", "--endpoint", "1", "--threshold", "0.05", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    twice = {p["design"]: p["trials"] for p in _plan(out)["by_design"]}
    # A regression closer to the threshold needs more trials to be told from it.
    assert all(closer[d] >= twice[d] for d in twice)
    assert closer["unbalanced"] > twice["unbalanced"]
    result = runner.invoke(
        main, ["plan", "--endpoint", "1", "--threshold", "0.05", "--effect", "0.05"]
    )
    assert result.exit_code == 2 and "at most about half the time" in result.output
    assert "--effect 0.1" in result.output
    result = runner.invoke(
        main, ["plan", "--endpoint", "1", "--threshold", "0.05", "--effect", "10%"]
    )
    assert result.exit_code == 2 and "both be relative or both absolute" in result.output


def _plan(out: Path) -> dict[str, Any]:
    """``plan --json``'s document, checked against docs/schema/plan.json."""
    document: dict[str, Any] = json.loads(out.read_text())
    check_schema("plan", document)
    return document


def test_plan_on_host_pairs_gives_each_designs_trials_as_rounds_and_minutes(
    tmp_path: Path,
) -> None:
    """False failure: none: the plans come from seeded simulations, the same on every run."""
    out = tmp_path / "plan.json"
    result = CliRunner().invoke(
        main,
        ["plan", "--endpoint", "1", "--threshold", "0.05", "--host-pairs", "1,4,2",
         "--trial-s", "30", "--json", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "The same trials on host pairs side by side" in result.output
    for plan in _plan(out)["by_design"]:
        trials = plan["trials"]
        assert [(p["host_pairs"], p["rounds"]) for p in plan["on_pairs"]] == [
            (1, trials), (2, -(-trials // 2)), (4, -(-trials // 4))
        ]  # fmt: skip
        assert [p["minutes"] for p in plan["on_pairs"]] == [
            p["rounds"] * 0.5 for p in plan["on_pairs"]
        ]
    bad = CliRunner().invoke(
        main, ["plan", "--endpoint", "1", "--threshold", "0.05", "--host-pairs", "0,2"]
    )
    assert bad.exit_code == 2 and "--host-pairs '0,2'" in bad.output
