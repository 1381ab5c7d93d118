"""``hairline suggest``: which functions a diff modifies, what they cost in production, the
endpoints they reach, and whether the diff is worth an experiment (docs/suggest.md).

With ``--diffs FILE`` (one ``BASE HEAD`` pair a line) and ``--budget-machine-hours H``: the
diffs with the highest impact whose experiments fit the budget. Exit 0 whatever it
suggests ("nothing to test" says why); 2 on a mistake (no repository, an unknown revision, a
bad profile line).
"""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from hairline.cli._base import main
from hairline.cli._options import esc
from hairline.errors import ConfigError
from hairline.lab.files import load_experiment_file
from hairline.suggest.plan import (
    ChosenSuggestionJson,
    Suggestion,
    SuggestionsJson,
    hours_per_test,
    read_profiles,
    suggest,
    suggestion_json,
)
from hairline.suggest.score import parse_score_threshold, within_budget

__all__ = ["suggest_command"]


def _read_diffs(path: Path) -> list[tuple[str, str]]:
    try:
        lines = path.read_text().splitlines()
    except OSError as err:
        raise ConfigError(f"--diffs {path}: {err.strerror or err}", hint="check the path") from err
    pairs = []
    for number, line in enumerate(lines, start=1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) != 2:
            raise ConfigError(
                f"--diffs {path}:{number}: {line.strip()!r} is not a pair of revisions",
                hint="write one `BASE HEAD` pair a line, e.g. `main~1 main`",
            )
        pairs.append((words[0], words[1]))
    return pairs


def _markdown(s: Suggestion) -> str:
    diff = s.impact
    lines = [
        f"### DiffSuggester: {s.head} against {s.base}",
        "",
        f"**{'test' if s.test else 'nothing to test'}**: {s.reason}. Impact "
        f"{diff.cost:,.6g} {diff.unit} ({diff.share:.3%} of the profile).",
        "",
        "| function | change | cost | share |",
        "|---|---|---:|---:|",
        *(
            f"| `{f.function.name}` | {f.function.change_text} | {f.cost:,.6g} "
            f"| {f.share(diff.total):.3%} |"
            for f in diff.functions
        ),
    ]
    if diff.endpoints:
        lines += [
            "",
            "| endpoint | share of the change's cost | of the endpoint |",
            "|---|---:|---:|",
        ]
        lines += [f"| `{e.endpoint}` | {e.share:.1%} | {e.fraction:.1%} |" for e in diff.endpoints]
    return "\n".join(lines) + "\n"


def _show(out: Console, s: Suggestion) -> None:
    diff = s.impact
    table = Table(title=f"{s.head} against {s.base}", title_justify="left")
    for name in ("function", "change", f"cost ({diff.unit})", "share", "self"):
        table.add_column(name, justify="left" if name in ("function", "change") else "right")
    for f in diff.functions:
        table.add_row(
            esc(f.function.name),
            esc(f.function.change_text),
            f"{f.cost:,.6g}",
            f"{f.share(diff.total):.3%}",
            f"{f.self_cost:,.6g}",
        )
    out.print(table)
    if diff.endpoints:
        ends = Table(title="endpoints it reaches", title_justify="left")
        for name in ("endpoint", "share of the change's cost", "of the endpoint's cost"):
            ends.add_column(name, justify="left" if name == "endpoint" else "right")
        for e in diff.endpoints:
            ends.add_row(esc(e.endpoint), f"{e.share:.1%}", f"{e.fraction:.1%}")
        out.print(ends)
    if s.changed.other_files:
        out.print(
            f"[dim]files of other languages not read: {esc(', '.join(s.changed.other_files))}[/]"
        )
    verdict = "[bold green]test[/]" if s.test else "[bold]nothing to test[/]"
    out.print(
        f"{verdict}: {esc(s.reason)} (impact {diff.cost:,.6g} {esc(diff.unit)}, "
        f"{diff.share:.3%} of the profile)"
    )


@main.command("suggest")
@click.option(
    "--repo",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="The service's git repository.",
)
@click.option("--base", help="The revision the change is compared with (default HEAD^).")
@click.option("--head", help="The change's revision (default HEAD).")
@click.option(
    "--profile",
    "profiles",
    multiple=True,
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A profile of production: folded stacks or pprof. Repeatable: merged.",
)
@click.option(
    "--endpoint-label",
    default="endpoint",
    show_default=True,
    help="The pprof sample label that names the endpoint.",
)
@click.option(
    "--threshold",
    metavar="SCORE",
    help="Test when the impact reaches this share of the profile (0.001, 0.1%) or "
    "this cost (a number above 1, in the profile's unit).",
)
@click.option(
    "--diffs",
    "diffs_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A file of `BASE HEAD` pairs, one a line: pick those that fit the budget.",
)
@click.option(
    "--budget-machine-hours",
    type=click.FloatRange(0),
    metavar="H",
    help="With --diffs: the machine-hours the experiments may take.",
)
@click.option(
    "--hours-per-test",
    type=click.FloatRange(0, min_open=True),
    metavar="H",
    help="Machine-hours one experiment takes (default: from --experiment).",
)
@click.option(
    "--experiment",
    type=click.Path(dir_okay=False, path_type=Path),
    help="An experiment file: its trials x (warm-up + duration) x arms give --hours-per-test.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--markdown", "as_markdown", is_flag=True, help="Print Markdown.")
def suggest_command(
    repo: Path,
    base: str | None,
    head: str | None,
    profiles: tuple[Path, ...],
    endpoint_label: str,
    threshold: str | None,
    diffs_path: Path | None,
    budget_machine_hours: float | None,
    hours_per_test: float | None,
    experiment: Path | None,
    as_json: bool,
    as_markdown: bool,
) -> None:
    """Score a diff (or a list of diffs) by the production cost of the functions it
    modifies, and name the endpoints an experiment should replay (ServiceLab 3.1)."""
    if threshold is not None and diffs_path is not None:
        raise ConfigError(
            "--threshold and --diffs are two ways to choose",
            hint="give --threshold for one diff, or --diffs with --budget-machine-hours",
        )
    limit = parse_score_threshold(threshold) if threshold is not None else None
    profile = read_profiles(list(profiles), endpoint_label=endpoint_label)
    out = Console(highlight=False)
    if diffs_path is None:
        if budget_machine_hours is not None:
            raise ConfigError(
                "--budget-machine-hours needs --diffs FILE",
                hint="list the diffs to choose from, one `BASE HEAD` a line",
            )
        one = suggest(repo, base or f"{head or 'HEAD'}^", head or "HEAD", profile, limit)
        if as_json:
            click.echo(json.dumps(suggestion_json(one), indent=2))
        elif as_markdown:
            click.echo(_markdown(one), nl=False)
        else:
            _show(out, one)
        return
    if budget_machine_hours is None:
        raise ConfigError(
            "--diffs needs --budget-machine-hours H",
            hint="say how many machine-hours the experiments may take",
        )
    per_test_h = hours_per_test
    if per_test_h is None:
        if experiment is None:
            raise ConfigError(
                "--diffs needs --hours-per-test H or --experiment FILE",
                hint="give what one experiment costs in machine-hours",
            )
        per_test_h = _experiment_hours(experiment)
    found = [suggest(repo, b, h, profile, None) for b, h in _read_diffs(diffs_path)]
    chosen = set(
        within_budget(
            [(i, s.impact.share) for i, s in enumerate(found)],
            budget_h=budget_machine_hours,
            per_test_h=per_test_h,
        )
    )
    rows: list[ChosenSuggestionJson] = [
        {**suggestion_json(s), "chosen": i in chosen} for i, s in enumerate(found)
    ]
    if as_json:
        ranked: SuggestionsJson = {
            "budget_machine_hours": budget_machine_hours,
            "hours_per_test": per_test_h,
            "diffs": rows,
        }
        click.echo(json.dumps(ranked, indent=2))
        return
    table = Table(
        title=f"{len(chosen)} of {len(found)} diffs fit {budget_machine_hours:g} "
        f"machine-hours at {per_test_h:.3g} each",
        title_justify="left",
    )
    for name in ("diff", "impact", "share", "endpoints", "test"):
        table.add_column(name, justify="left" if name in ("diff", "endpoints") else "right")
    for i, s in enumerate(found):
        table.add_row(
            esc(f"{s.base}..{s.head}"),
            f"{s.impact.cost:,.6g}",
            f"{s.impact.share:.3%}",
            esc(", ".join(e.endpoint for e in s.impact.endpoints[:3])),
            "yes" if i in chosen else "no",
        )
    out.print(table)


def _experiment_hours(path: Path) -> float:
    return hours_per_test(load_experiment_file(path))
