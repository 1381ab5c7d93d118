"""A bisection's terminal table, Markdown and JSON, from a result made by hand."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from hairline.lab.bisect import Bisection, Revision, StepResult
from hairline.report.bisect import headline, print_bisection, render_bisection_markdown
from hairline.stats.bisection import Finished, Outcome, Step
from schema_check import check_schema

REVISIONS = tuple(Revision(f"{i:x}" * 40, f"commit {i + 1}: tidy up") for i in range(8))


def step(baseline: int, candidate: int, purpose: str, outcome: Outcome,
         effect: float, attempt: int = 1) -> StepResult:  # fmt: skip
    return StepResult(
        step=Step(baseline, candidate, 4 * attempt, "confirm" if purpose == "confirm" else
                  "search", attempt),
        baseline=REVISIONS[baseline], candidate=REVISIONS[candidate], experiment_id=candidate,
        outcome=outcome, effect_rel=effect, ci_low=effect - 0.02, ci_high=effect + 0.02,
        p_value=0.01, threshold="0.05 rel",
    )  # fmt: skip


FOUND = Bisection(
    service="feed",
    metric="cpu_ns_per_request",
    revisions=REVISIONS,
    steps=(
        step(0, 3, "search", "no change", 0.001),
        step(0, 5, "search", "inconclusive", 0.06),
        step(0, 5, "search", "regression", 0.08, attempt=2),
        step(0, 4, "search", "regression", 0.08),
        step(3, 4, "confirm", "regression", 0.08),
    ),
    finished=Finished("culprit", 4, 3, 4, "its change from its parent exceeds the threshold"),
)


def test_markdown_names_the_culprit_and_every_step() -> None:
    text = render_bisection_markdown(FOUND)
    assert "**culprit: 4444444444 commit 5: tidy up (5 experiments;" in text
    assert "| 3 | search (repeat 1) | `5555555555` commit 6: tidy up | `0000000000` | 8 |" in text
    assert "| regression | +8.00% | [+6.00%, +10.00%] | 5% | 5 |" in text
    assert text.count("\n| ") == 6  # the header and five steps


def test_the_terminal_shows_the_table_and_the_culprit() -> None:
    buffer = io.StringIO()
    print_bisection(FOUND, Console(file=buffer, width=200, highlight=False))
    shown = buffer.getvalue()
    assert "bisection of feed on cpu_ns_per_request" in shown
    assert "search (repeat 1)" in shown and "confirm" in shown
    assert shown.strip().endswith("exceeds the threshold)")


def test_json_is_plain_data_with_the_culprit_and_the_range() -> None:
    data = json.loads(json.dumps(FOUND.as_json()))
    check_schema("bisection", data)
    assert data["status"] == "culprit" and data["experiments"] == 5
    assert data["culprit"] == {"commit": "4" * 40, "subject": "commit 5: tidy up"}
    assert data["range"] == ["3" * 40, "4" * 40]
    assert data["steps"][2]["attempt"] == 2 and data["steps"][2]["trials"] == 8
    assert data["steps"][4]["ci_rel"] == pytest.approx([0.06, 0.10])


@pytest.mark.parametrize(
    ("status", "words"),
    [
        ("none", "no regression in the range"),
        ("gradual", "no single culprit: the change builds up between 3333333333 and 4444444444"),
        ("inconclusive", "undecided between 3333333333 and 4444444444"),
        ("budget", "out of experiments between 3333333333 and 4444444444"),
    ],
)
def test_the_headline_says_why_no_culprit_was_named(status: str, words: str) -> None:
    ended = Bisection(
        "feed", "cpu_ns_per_request", REVISIONS, FOUND.steps[:1],
        Finished(status, None, 3, 4, "why"),  # type: ignore[arg-type]
    )  # fmt: skip
    assert headline(ended) == f"{words} (1 experiment; why)"
