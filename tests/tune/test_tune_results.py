"""A tuning run as a reader sees it (``tuning show``, ``tuning list``): true after an
interrupt or a killed driver, with the infeasibility rule said where it was applied."""

from __future__ import annotations

from typing import Any

from hairline.tune.report import infeasible_rule, render_tuning_markdown
from hairline.tune.results import TuningResult
from hairline.tune.runs import DRIVER_STALE_S, EvaluationRow, RunRow

NOW = 1_000_000.0


def run_row(state: str, *, heartbeat_at: float | None, reason: str = "") -> RunRow:
    summary: dict[str, Any] = {"metric": "cpu_ns_per_request", "higher_is_better": False,
                               "evaluations": 3, "default": {"codec": "none"},
                               "infeasible_after_failures": 2}  # fmt: skip
    return RunRow(id=4, name="tune", service="sample", searcher="bo", state=state,
                  reason=reason, source_file="tune.toml", digest="d", summary=summary,
                  clusters={}, aa_experiment_id=None, created_at=NOW - 600,
                  finished_at=None, heartbeat_at=heartbeat_at)  # fmt: skip


def evaluation(position: int, status: str, *, reason: str = "", failures: int = 0,
               value: float | None = None) -> EvaluationRow:  # fmt: skip
    return EvaluationRow(position=position, batch=1, config={"codec": f"c{position}"},
                         status=status, experiment_id=10 + position, arm=f"c{position + 1}",
                         value=value, se=0.01 if value is not None else None,
                         effect_rel=None if value is None else -value, ci_low=None,
                         ci_high=None, mean_control=None, mean_candidate=None, reason=reason,
                         candidate_failures=failures)  # fmt: skip


def test_a_live_run_is_shown_as_written() -> None:
    result = TuningResult(run_row("running", heartbeat_at=NOW - 3), (evaluation(0, "running"),))
    assert result.as_seen(NOW) is result


def test_after_ctrl_c_no_evaluation_is_left_running() -> None:
    """The run says failed (interrupted); an evaluation still written "running" (a run
    stopped before this was recorded) is shown interrupted, with how to go on."""
    result = TuningResult(
        run_row("failed", heartbeat_at=None, reason="interrupted"),
        (evaluation(0, "done", value=0.05), evaluation(1, "running")),
    ).as_seen(NOW)
    assert [e.status for e in result.evaluations] == ["done", "interrupted"]
    assert "--resume 4" in result.evaluations[1].reason
    assert result.as_json()["evaluations"][1]["status"] == "interrupted"


def test_a_killed_driver_is_seen_as_failed_with_its_evaluations_interrupted() -> None:
    """SIGKILL leaves the run "running"; a driver silent for DRIVER_STALE_S is gone."""
    stale = NOW - DRIVER_STALE_S - 5
    result = TuningResult(run_row("running", heartbeat_at=stale), (evaluation(0, "running"),))
    seen = result.as_seen(NOW)
    assert seen.run.state == "failed"
    assert "no sign of life for 35 s" in seen.run.reason and "--resume 4" in seen.run.reason
    assert seen.evaluations[0].status == "interrupted"
    assert result.run.state == "running"  # the reader wrote nothing


def test_the_rule_is_said_under_a_run_that_applied_it() -> None:
    why = ("infeasible: its arm failed (and the default arm did not) in 2 experiments "
           "(infeasible_after_failures = 2); the last: ...")  # fmt: skip
    rows = (evaluation(0, "done", value=0.05),
            evaluation(1, "infeasible", failures=2, reason=why))  # fmt: skip
    result = TuningResult(run_row("done", heartbeat_at=None), rows)
    rule = infeasible_rule(result)
    assert "failed 2 times" in rule and "infeasible_after_failures = 2" in rule
    markdown = render_tuning_markdown(result)
    assert rule in markdown and "infeasible_after_failures = 2); the last" in markdown
    assert result.as_json()["infeasible_after_failures"] == 2
    assert result.as_json()["evaluations"][1]["candidate_failures"] == 2


def test_no_rule_where_nothing_failed() -> None:
    result = TuningResult(run_row("done", heartbeat_at=None), (evaluation(0, "done", value=0.1),))
    assert infeasible_rule(result) == ""
    assert "infeasible" not in render_tuning_markdown(result)
