"""``hairline bisect FILE --good REV --bad REV``: the revision that made the regression.

Each step is an A/B experiment of the file's baseline arm at two revisions, queued with
``origin="bisect"`` and processed here as ``hairline run`` processes (the same function).
Exit status: 0 a culprit named, 1 none (no regression in the range, or only small changes
adding up with no single culprit), 2 an error, or undecided (a step stayed inconclusive
after its repeats, or ``--max-experiments`` ran out); 3 gave up waiting for hosts.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import click
from rich.console import Console

from hairline.cli._base import EXIT_ERROR, EXIT_OK, EXIT_REGRESSION, console, main
from hairline.cli._options import (
    RUN_WAIT_S,
    backend_options,
    chosen_backend,
    esc,
    junit_option,
    store_options,
    wait_option,
)
from hairline.cli._outputs import OutputFile
from hairline.cli.experiments import write_document, write_documents
from hairline.cli.run import execute
from hairline.config import ExperimentConfig
from hairline.lab.bisect import DEFAULT_METRIC, Bisection, bisect
from hairline.lab.files import load_experiment_file
from hairline.report.bisect import print_bisection, render_bisection_markdown
from hairline.report.junit import render_bisection_junit
from hairline.store.db import open_store

__all__: list[str] = []

_EXIT = {"culprit": EXIT_OK, "none": EXIT_REGRESSION, "gradual": EXIT_REGRESSION}


@main.command(name="bisect")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--good", required=True, metavar="REV",
              help="A revision without the regression (older).")  # fmt: skip
@click.option("--bad", required=True, metavar="REV",
              help="A revision with it (newer, on the same first-parent line).")  # fmt: skip
@click.option("--metric", default=DEFAULT_METRIC, show_default=True,
              help="The metric whose threshold (the service file's) a change must "
              "exceed.")  # fmt: skip
@click.option("--max-experiments", type=int, default=None, metavar="N",
              help="Stop after N experiments, repeats included (default: a clean "
              "bisection's count plus 2).")  # fmt: skip
@click.option("--json", "json_path", type=OutputFile(),
              help="Write the result as JSON ('-' for stdout).")  # fmt: skip
@click.option("--markdown", "markdown_path", type=OutputFile(),
              help="Write the result as Markdown ('-' for stdout); also appended to "
              "$GITHUB_STEP_SUMMARY when that is set.")  # fmt: skip
@junit_option
@click.option("--cpus-per-host", type=click.IntRange(1),
              help="CPUs per local host (default: as `hairline run`).")  # fmt: skip
@wait_option(RUN_WAIT_S, "the step's experiment stays queued")
@backend_options
@store_options
def bisect_command(
    file: Path,
    good: str,
    bad: str,
    metric: str,
    max_experiments: int | None,
    json_path: Path | None,
    markdown_path: Path | None,
    junit_path: Path | None,
    cpus_per_host: int | None,
    wait_s: float,
    backend: str,
    ray_address: str | None,
    db_url: str | None,
    home: Path,
) -> None:
    """Find the first revision between --good and --bad whose change exceeds the metric's
    threshold, by A/B experiments of FILE's baseline arm at pairs of revisions (its
    `repo`, or the file's folder). Exit status: 0 a culprit, 1 none, 2 an error or
    undecided, 3 gave up waiting for hosts (docs/bisect.md)."""
    out = console(json_path, markdown_path, junit_path)
    started = datetime.now(UTC).replace(microsecond=0).isoformat()
    config = load_experiment_file(file)
    options = chosen_backend(backend, ray_address)
    store = open_store(db_url, home=home)

    def run(step: ExperimentConfig) -> int:
        return execute(
            step, kind="ab", store=store, no_process=False, no_wait=False, lease_s=30.0,
            cpus_per_host=cpus_per_host, out=out, backend=options, wait_s=wait_s,
            origin="bisect",
        )  # fmt: skip

    def progress(line: str) -> None:
        out.print(f"[bold]bisect[/]: {esc(line)}")

    try:
        result = bisect(
            config, good=good, bad=bad, run=run, store=store, metric=metric,
            max_experiments=max_experiments, on_event=progress,
        )  # fmt: skip
    finally:
        store.close()
    _emit(result, out, json_path, markdown_path)
    if junit_path is not None:
        write_document(out, render_bisection_junit(result, timestamp=started), junit_path)
    sys.exit(_EXIT.get(result.finished.status, EXIT_ERROR))


def _emit(
    result: Bisection, out: Console, json_path: Path | None, markdown_path: Path | None
) -> None:
    print_bisection(result, out)
    write_documents(
        out, render_bisection_markdown(result), result.as_json(),
        markdown_path=markdown_path, json_path=json_path, what="result",
    )  # fmt: skip
