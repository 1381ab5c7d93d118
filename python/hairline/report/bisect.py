"""A bisection's result for people: the terminal table and Markdown (a PR comment or a CI
step summary). Its JSON is :meth:`hairline.lab.bisect.Bisection.as_json`."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from hairline.lab.bisect import Bisection, Revision, StepResult

__all__ = [
    "headline",
    "print_bisection",
    "render_bisection_markdown",
    "step_effect",
    "step_interval",
]

_SHORT = 10


def _revision(revision: Revision) -> str:
    return f"{revision.commit[:_SHORT]} {revision.subject}"


def headline(result: Bisection) -> str:
    """One line: the culprit, or why none was named."""
    end = result.finished
    count = f"{len(result.steps)} experiment{'s' if len(result.steps) != 1 else ''}"
    if result.culprit is not None:
        return f"culprit: {_revision(result.culprit)} ({count}; {end.reason})"
    low, high = result.revisions[end.low], result.revisions[end.high]
    where = f"between {low.commit[:_SHORT]} and {high.commit[:_SHORT]}"
    words = {
        "none": "no regression in the range",
        "gradual": f"no single culprit: the change builds up {where}",
        "inconclusive": f"undecided {where}",
        "budget": f"out of experiments {where}",
        "failed": f"stopped by a failed step {where}",
    }
    return f"{words.get(end.status, end.status)} ({count}; {end.reason})"


def step_effect(step: StepResult) -> str:
    """A step's relative effect, ``+8.00%`` ("" when it has none)."""
    return "" if step.effect_rel is None else f"{step.effect_rel:+.2%}"


def step_interval(step: StepResult) -> str:
    """A step's interval, ``[+6.00%, +10.00%]`` ("" when it has none)."""
    if step.ci_low is None or step.ci_high is None:
        return ""
    return f"[{step.ci_low:+.2%}, {step.ci_high:+.2%}]"


def _what(step: StepResult) -> str:
    again = f" (repeat {step.step.attempt - 1})" if step.step.attempt > 1 else ""
    return f"{step.step.purpose}{again}"


def print_bisection(result: Bisection, out: Console) -> None:
    table = Table(title=f"bisection of {escape(result.service)} on {escape(result.metric)}")
    for column in ("#", "step", "candidate", "against", "trials", "verdict", "effect",
                   "interval", "threshold", "experiment"):  # fmt: skip
        table.add_column(column)
    for number, step in enumerate(result.steps, 1):
        table.add_row(
            str(number), _what(step), escape(_revision(step.candidate)),
            step.baseline.commit[:_SHORT], str(step.step.trials), step.outcome, step_effect(step),
            step_interval(step), step.threshold_text, str(step.experiment_id),
        )  # fmt: skip
    out.print(table)
    colour = "red" if result.culprit is not None else "yellow"
    out.print(f"[bold {colour}]{escape(headline(result))}[/]")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_bisection_markdown(result: Bisection) -> str:
    lines = [
        f"## hairline bisect: {_cell(result.service)}, `{result.metric}`",
        "",
        f"**{_cell(headline(result))}**",
        "",
        f"Range: `{result.revisions[0].commit[:_SHORT]}` (good) to "
        f"`{result.revisions[-1].commit[:_SHORT]}` (bad), {len(result.revisions) - 1} commits.",
        "",
        "| # | step | candidate | against | trials | verdict | effect | interval | threshold "
        "| experiment |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for number, step in enumerate(result.steps, 1):
        cells = [
            str(number), _what(step), f"`{step.candidate.commit[:_SHORT]}` "
            f"{_cell(step.candidate.subject)}", f"`{step.baseline.commit[:_SHORT]}`",
            str(step.step.trials), step.outcome, step_effect(step), step_interval(step),
            step.threshold_text, str(step.experiment_id),
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
