"""``hairline history SERVICE``: the change points of a service's metric history, as the
service page shows them (web/changes.py on web/pagedata.py's metric_history), each with
the experiments and commits on either side of it, its size and its p-value."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table
from typing_extensions import TypedDict

from hairline.cli._base import console, main
from hairline.cli._options import esc, store_options, write_json_output
from hairline.cli._outputs import OutputFile
from hairline.errors import HairlineError
from hairline.kit.jsonout import to_jsonable
from hairline.stats.changepoints import DEFAULT_ALPHA, DEFAULT_PERMUTATIONS
from hairline.store.db import open_store
from hairline.web.changes import HistoryChange, metric_changes
from hairline.web.pagedata import HistoryPoint, metric_history, service_names

__all__ = ["HISTORY_JSON_SCHEMA", "HistoryJson", "history_json"]

# Bumped when a key of history_json changes meaning or disappears (adding keys does not).
HISTORY_JSON_SCHEMA = 1


class HistorySideJson(TypedDict):
    """An experiment on one side of a change point."""

    experiment_id: int
    candidate: str
    """The candidate arm whose verdict this is."""
    commit: str | None
    """The candidate's commit when it was built from git, else null."""
    source: str
    """The candidate's source as built ("git 1a2b3c4d (main)", "path ...")."""
    relative_effect: float | None
    """The candidate's effect on the metric against the baseline, a fraction."""


class HistoryChangeJson(TypedDict):
    """A change of the metric's level between two experiments."""

    last_before: HistorySideJson
    first_after: HistorySideJson
    before: float
    """The median relative effect of the level before the change, a fraction."""
    after: float
    """The median relative effect of the level after it, a fraction."""
    size: float
    """after - before."""
    p_value: float
    """The split's permutation test's p-value."""


class HistoryMetricJson(TypedDict):
    """One metric's history and its change points."""

    metric: str
    experiments: list[int]
    """The experiments searched, oldest first."""
    changes: list[HistoryChangeJson]


class HistorySettingsJson(TypedDict):
    """The search's settings (the command's options)."""

    alpha: float
    permutations: int
    seed: int
    limit: int


class HistoryJson(TypedDict):
    """``hairline history --json``."""

    schema: int
    """Bumped when a key changes meaning or disappears (adding keys does not)."""
    service: str
    settings: HistorySettingsJson
    metrics: list[HistoryMetricJson]


def _point(p: HistoryPoint) -> HistorySideJson:
    return {
        "experiment_id": p.experiment_id,
        "candidate": p.candidate,
        "commit": p.commit,
        "source": p.source,
        "relative_effect": p.relative_effect,
    }


def history_json(
    service: str,
    history: dict[str, tuple[HistoryPoint, ...]],
    changes: dict[str, tuple[HistoryChange, ...]],
    settings: HistorySettingsJson,
) -> HistoryJson:
    """``hairline history --json``: per metric, its experiments (oldest first) and each
    change point with ``last_before`` and ``first_after`` (experiment id, candidate arm,
    commit or null, source, relative effect), ``before`` and ``after`` (median relative
    effects of the levels either side, fractions), ``size`` (after - before) and
    ``p_value``."""
    payload: HistoryJson = to_jsonable(
        {
            "schema": HISTORY_JSON_SCHEMA,
            "service": service,
            "settings": settings,
            "metrics": [
                {
                    "metric": metric,
                    "experiments": [p.experiment_id for p in points],
                    "changes": [
                        {
                            "last_before": _point(c.last_before),
                            "first_after": _point(c.first_after),
                            "before": c.before,
                            "after": c.after,
                            "size": c.size,
                            "p_value": c.p_value,
                        }
                        for c in changes[metric]
                    ],
                }
                for metric, points in history.items()
            ],
        }
    )
    return payload


def _side(p: HistoryPoint) -> str:
    return f"#{p.experiment_id} {p.commit}" if p.commit else f"#{p.experiment_id} ({p.candidate})"


@main.command()
@click.argument("service")
@store_options
@click.option(
    "--metric",
    "metrics",
    multiple=True,
    help="Only this metric (repeat for more; default every metric).",
)
@click.option(
    "--limit",
    type=click.IntRange(6),
    default=100,
    show_default=True,
    help="The newest finished A/B experiments searched (the service page's 100).",
)
@click.option(
    "--alpha",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=DEFAULT_ALPHA,
    show_default=True,
    help="Each split's permutation test's level.",
)
@click.option(
    "--permutations",
    type=click.IntRange(19),
    default=DEFAULT_PERMUTATIONS,
    show_default=True,
    help="Shuffles per test.",
)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="The shuffles' seed: the same history gives the same answer.",
)
@click.option("--json", "json_path", type=OutputFile(),
              help="Write the change points as JSON ('-' for stdout).")  # fmt: skip
def history(
    service: str,
    db_url: str | None,
    home: Path,
    metrics: tuple[str, ...],
    limit: int,
    alpha: float,
    permutations: int,
    seed: int,
    json_path: Path | None,
) -> None:
    """Change points in a service's history of verdicts (docs/dashboard.md).

    For each metric, the relative effects of the newest --limit finished A/B experiments,
    oldest first, are searched for places where their level moved and stayed moved:
    E-divisive with a seeded permutation test, a single outlying experiment set aside.
    Each change is printed with the last experiment (and commit) before it and the first
    after, the median effect either side, and its p-value. Exit status 0, 2 for a service
    or metric with no finished A/B experiment.
    """
    out = console(json_path)
    store = open_store(db_url, home=home, read_only=True)
    try:
        if service not in service_names(store, None):
            raise HairlineError(
                f"no experiment of service {service!r} in this lab",
                hint="`hairline status` lists the experiments and their services",
            )
        history_all = metric_history(store, service, None, limit=limit)
    finally:
        store.close()
    missing = [m for m in metrics if m not in history_all]
    if missing:
        raise HairlineError(
            f"service {service!r} has no verdict on {', '.join(map(repr, missing))}",
            hint=f"its metrics: {', '.join(history_all) or 'none yet'}",
        )
    chosen = {m: p for m, p in history_all.items() if not metrics or m in metrics}
    changes = {
        m: metric_changes(p, alpha=alpha, permutations=permutations, seed=seed)
        for m, p in chosen.items()
    }
    settings: HistorySettingsJson = {
        "alpha": alpha, "permutations": permutations, "seed": seed, "limit": limit
    }  # fmt: skip
    payload = history_json(service, chosen, changes, settings)
    for metric, points in chosen.items():
        found = changes[metric]
        title = (
            f"{esc(service)} · {esc(metric)}: {len(points)} experiments, "
            f"#{points[0].experiment_id} to #{points[-1].experiment_id}, "
        )
        if not found:
            out.print(title + "no change point")
            continue
        table = Table(title=title + f"{len(found)} change point(s)")
        for col in ("last before", "first after", "level", "size", "p"):
            table.add_column(col)
        for c in found:
            table.add_row(
                esc(_side(c.last_before)), esc(_side(c.first_after)),
                f"{c.before * 100:+.2f}% -> {c.after * 100:+.2f}%",
                f"{c.size * 100:+.2f} points", f"{c.p_value:.3g}",
            )  # fmt: skip
        out.print(table)
    if json_path is not None:
        write_json_output(out, json_path, payload)
