"""The Kayenta-style score (report/scorecard.py): classes, groups, weights, thresholds."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from hairline.config import ScoreConfig
from hairline.report.scorecard import JudgedVerdict, classify, group_of, scorecard

UP = "higher-is-worse"
DOWN = "lower-is-worse"


def verdict(metric: str, label: str, direction: str = UP, *, candidate: str = "B",
            ignored: bool = False) -> JudgedVerdict:  # fmt: skip
    return JudgedVerdict(metric, candidate, label, direction, ignored=ignored)


GROUPS = ScoreConfig.model_validate({
    "groups": {
        "cpu": {"weight": 3, "metrics": ["cpu_ns_per_request"]},
        "memory": {"weight": 1, "metrics": ["anon_memory_bytes", "peak_memory_bytes"]},
    }
})  # fmt: skip


def test_a_move_is_high_or_low_and_fails_only_in_the_worse_direction() -> None:
    assert classify(verdict("cpu", "regression"), inconclusive_passes=False) == ("high", False)
    assert classify(verdict("goodput", "regression", DOWN), inconclusive_passes=False) == (
        "low", False,
    )  # fmt: skip
    assert classify(verdict("cpu", "improvement"), inconclusive_passes=False) == ("low", True)
    assert classify(verdict("goodput", "improvement", DOWN), inconclusive_passes=False) == (
        "high", True,
    )  # fmt: skip
    assert classify(verdict("cpu", "no change"), inconclusive_passes=False) == ("pass", True)


def test_inconclusive_and_ignored_pass_as_the_gate_lets_them() -> None:
    unsure = verdict("cpu", "inconclusive")
    assert classify(unsure, inconclusive_passes=False) == ("inconclusive", False)
    assert classify(unsure, inconclusive_passes=True) == ("inconclusive", True)
    assert classify(verdict("cpu", "regression", ignored=True), inconclusive_passes=False) == (
        "high", True,
    )  # fmt: skip


def test_groups_weigh_their_share_of_passing_metrics() -> None:
    """cpu 100 (1 of 1) at weight 3, memory 50 (1 of 2) at weight 1: (300 + 50) / 4."""
    card = scorecard(
        [verdict("cpu_ns_per_request", "no change"), verdict("anon_memory_bytes", "regression"),
         verdict("peak_memory_bytes", "improvement")],
        GROUPS, inconclusive_passes=False,
    )  # fmt: skip
    assert card.score == 87.5 and card.result == "marginal"
    assert [(g.name, g.metrics, g.passed, g.score) for g in card.groups] == [
        ("cpu", 1, 1, 100.0), ("memory", 2, 1, 50.0),
    ]  # fmt: skip
    assert card.reason == (
        "87.5: marginal (pass at 95, marginal at 75); cpu 100 (1 of 1, weight 3), "
        "memory 50 (1 of 2, weight 1)"
    )


def test_without_groups_the_score_is_the_share_of_passing_metrics() -> None:
    """Kayenta's own example: 9 of 10 pass, 90."""
    verdicts = [verdict(f"m{i}", "no change") for i in range(9)] + [verdict("m9", "regression")]
    card = scorecard(verdicts, ScoreConfig(), inconclusive_passes=False)
    assert (card.score, card.result) == (90.0, "marginal")
    assert [g.name for g in card.groups] == ["all"]


def test_thresholds_make_pass_marginal_and_fail() -> None:
    def result(passing: int, of: int) -> str:
        verdicts = [verdict(f"m{i}", "no change" if i < passing else "regression")
                    for i in range(of)]  # fmt: skip
        return scorecard(verdicts, ScoreConfig(pass_score=80, marginal_score=50),
                         inconclusive_passes=False).result  # fmt: skip

    assert [result(4, 5), result(3, 5), result(2, 5), result(5, 5)] == [
        "pass", "marginal", "fail", "pass",
    ]  # fmt: skip


def test_every_candidate_counts_and_a_group_without_metrics_is_left_out() -> None:
    """Two candidates' cpu (one fails) make cpu 50; memory has no metric here, so the score
    is cpu's alone, whatever memory's weight."""
    card = scorecard(
        [verdict("cpu_ns_per_request", "regression", candidate="B"),
         verdict("cpu_ns_per_request", "no change", candidate="C")],
        GROUPS, inconclusive_passes=False,
    )  # fmt: skip
    assert card.score == 50.0
    assert [g.score for g in card.groups] == [50.0, None]


def test_a_critical_groups_failure_makes_the_score_zero() -> None:
    config = ScoreConfig.model_validate({"groups": {
        "errors": {"metrics": ["error_rate"], "critical": True, "weight": 1},
        "cpu": {"metrics": ["cpu_*"], "weight": 99},
    }})  # fmt: skip
    card = scorecard([verdict("error_rate", "regression"), verdict("cpu_ns_per_request",
                                                                   "no change")],
                     config, inconclusive_passes=False)  # fmt: skip
    assert (card.score, card.result) == (0.0, "fail")
    assert "critical metric failed: error_rate of B" in card.reason


def test_patterns_place_metrics_and_unnamed_ones_are_not_scored() -> None:
    config = ScoreConfig.model_validate({"groups": {
        "latency": {"metrics": ["latency_*"]},
        "cpu": {"metrics": ["cpu_ns_per_request", "latency_p99_us[/api]"]},
    }})  # fmt: skip
    # The first group that names a metric has it; an endpoint's brackets match exactly.
    assert group_of("latency_p99_us[/api]", config.groups) == "latency"
    assert group_of("cpu_ns_per_request", config.groups) == "cpu"
    card = scorecard([verdict("goodput_per_s", "regression", DOWN),
                      verdict("cpu_ns_per_request", "no change")],
                     config, inconclusive_passes=False)  # fmt: skip
    assert card.ungrouped == ("goodput_per_s",) and card.score == 100.0


def test_nothing_to_score_is_nodata() -> None:
    card = scorecard([], ScoreConfig(), inconclusive_passes=False)
    assert (card.score, card.result, card.reason) == (
        None,
        "nodata",
        "no deciding verdict to score",
    )


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"pass_score": 70, "marginal_score": 80}, "marginal_score 80 is above pass_score 70"),
        ({"pass_score": 101}, "less than or equal to 100"),
        ({"groups": {"cpu:x": {"metrics": ["cpu"]}}}, "no ':' or ','"),
        ({"groups": {"cpu": {"metrics": []}}}, "at least 1 item"),
        ({"groups": {"cpu": {"metrics": ["cpu"], "weight": 0}}}, "greater than 0"),
    ],
)
def test_bad_score_settings_say_what_is_wrong(fields: dict[str, object], words: str) -> None:
    with pytest.raises(ValidationError, match=words.replace("(", r"\(")):
        ScoreConfig.model_validate(fields)
