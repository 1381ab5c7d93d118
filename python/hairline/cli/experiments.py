"""Commands on experiments already in the lab: ``status``, ``report``, ``cancel``; and
the reports every command that ends with one writes (terminal, JSON, Markdown, HTML)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from hairline.cli._base import EXIT_ERROR, EXIT_OK, EXIT_REGRESSION, console, main
from hairline.cli._options import esc, otlp_target, report_options, store_options
from hairline.cli._outputs import is_stdout, write_json_output, write_output
from hairline.lab.queue import request_cancel
from hairline.lab.status import artifacts_dir, experiment_rows, phase_of
from hairline.report.context import ExperimentReport, experiment_json
from hairline.report.experiment import load_report
from hairline.report.html import render_html
from hairline.report.markdown import append_step_summary, render_markdown
from hairline.report.otlp import otlp_batch
from hairline.report.otlpexport import OtlpTarget, export_otlp
from hairline.report.terminal import print_experiment
from hairline.store.db import Store, open_store
from hairline.store.models import TERMINAL_PHASES

__all__ = [
    "emit_reports",
    "exit_code",
    "send_otlp",
    "write_document",
    "write_documents",
    "write_junit",
]


def emit_reports(
    store: Store,
    experiment_id: int,
    out: Console,
    *,
    json_path: Path | None,
    markdown_path: Path | None,
    html_path: Path | None,
    junit_path: Path | None = None,
    otlp: OtlpTarget | None = None,
    reanalyse: bool = False,
) -> ExperimentReport:
    report = load_report(store, experiment_id, reanalyse=reanalyse)
    artifacts = artifacts_dir(store, experiment_id)
    html_file = artifacts / "report.html"
    report = _with_html(report, html_file)
    html_file.parent.mkdir(parents=True, exist_ok=True)
    html_file.write_text(render_html(report))
    if html_path is not None:
        write_output(out, html_path, html_file.read_text())
        if not is_stdout(html_path):
            report = _with_html(report, html_path.resolve())
    print_experiment(report, out)
    write_documents(
        out, render_markdown(report), experiment_json(report),
        markdown_path=markdown_path, json_path=json_path,
    )  # fmt: skip
    if junit_path is not None:
        write_junit(out, store, report, junit_path)
    if otlp is not None:
        send_otlp(out, report, otlp)
    out.print(f"HTML report: {report.html_path}")
    return report


def send_otlp(out: Console, report: ExperimentReport, target: OtlpTarget) -> None:
    """The verdicts and per-trial values to an OTLP endpoint; a failure is a warning and
    nothing more (the exit status stays the verdict's)."""
    sent = export_otlp(otlp_batch(report, os.environ), target)
    out.print(esc(sent.text) if sent.ok else f"[yellow]{esc(sent.text)}[/]", soft_wrap=True)


def write_junit(out: Console, store: Store, report: ExperimentReport, path: Path) -> None:
    """The JUnit XML of ``report`` as its gate judges it, to ``path`` or stdout."""
    from hairline.web.queries import gate_junit

    write_document(out, gate_junit(store, report.experiment_id), path)


def write_document(out: Console, text: str, path: Path) -> None:
    """A document to ``path`` (whole or not at all) or, for '-', to stdout."""
    write_output(out, path, text)


def write_documents(
    out: Console,
    markdown: str,
    payload: Any,
    *,
    markdown_path: Path | None,
    json_path: Path | None,
    what: str = "report",
) -> None:
    """A command's Markdown and JSON documents: each to its path or, for '-', to stdout;
    the Markdown also appended to $GITHUB_STEP_SUMMARY when that is set."""
    if markdown_path is not None:
        write_output(out, markdown_path, markdown)
    summary = append_step_summary(markdown)
    if summary is not None:
        out.print(f"appended the {what} to {summary}")
    if json_path is not None:
        write_json_output(out, json_path, payload)


def _with_html(report: ExperimentReport, path: Path) -> ExperimentReport:
    return dataclasses.replace(report, html_path=path)


def exit_code(report: ExperimentReport) -> int:
    if report.phase != "done":
        return EXIT_ERROR
    if report.kind == "aa":
        return EXIT_OK
    if report.analysis is not None and report.analysis.regressions:
        return EXIT_REGRESSION
    return EXIT_OK


@main.command()
@click.argument("experiment_id", type=int)
@store_options
@click.option("--wait", "wait_s", type=float, default=0.0, show_default=True,
              help="Wait up to this many seconds for a running experiment to stop.")  # fmt: skip
def cancel(experiment_id: int, db_url: str | None, home: Path, wait_s: float) -> None:
    """Cancel a queued or running experiment.

    A queued (or waiting) experiment is cancelled at once. A running one stops at the next
    safe point, between batches: its arms are killed, its hosts released, its phase becomes
    cancelled. Exit status 0 once cancelled or asked, 2 if there is nothing to cancel.
    """
    out = console()
    store = open_store(db_url, home=home)
    try:
        outcome = request_cancel(store, experiment_id)
        if outcome == "cancelled":
            out.print(f"experiment {experiment_id}: cancelled")
            return
        out.print(
            f"experiment {experiment_id}: cancel requested; its processor stops at the next batch"
        )
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            phase = phase_of(store, experiment_id)[0]
            if phase in TERMINAL_PHASES:
                out.print(f"experiment {experiment_id}: {phase}")
                return
            time.sleep(0.5)
    finally:
        store.close()


@main.command()
@click.argument("experiment_id", type=int, required=False)
@store_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def status(experiment_id: int | None, db_url: str | None, home: Path, as_json: bool) -> None:
    """List experiments, or show one."""
    out = console()
    store = open_store(db_url, home=home, read_only=True)
    try:
        if experiment_id is not None:
            report = load_report(store, experiment_id)
            if as_json:
                click.echo(json.dumps(experiment_json(report), indent=2, default=str))
            else:
                print_experiment(report, out)
            return
        rows = experiment_rows(store)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table(title="experiments")
    for col in ("id", "service", "kind", "team", "phase", "trials", "regressions", "progress"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            str(r["id"]), r["service"], r["kind"], r["team"], r["phase"],
            f"{r['trials_done']}/{r['trials']}", str(r["regressions"]),
            esc(str(r["failure"] or r["progress"]))[:80],
        )  # fmt: skip
    out.print(table)


@main.command()
@click.argument("experiment_id", type=int)
@store_options
@report_options
@click.option("--reanalyse", is_flag=True,
              help="Analyse the trials again instead of reading the stored analysis.")  # fmt: skip
def report(
    experiment_id: int,
    db_url: str | None,
    home: Path,
    json_path: Path | None,
    markdown_path: Path | None,
    html_path: Path | None,
    junit_path: Path | None,
    otlp_url: str | None,
    otlp_timeout_s: float,
    reanalyse: bool,
) -> None:
    """Report on one experiment (terminal, and --json/--markdown/--html/--junit/--otlp).

    Exit status as for `hairline run`: 0 no regression, 1 a regression, 2 failed/unfinished.
    """
    out = console(json_path, markdown_path, junit_path)
    store = open_store(db_url, home=home)
    try:
        result = emit_reports(
            store, experiment_id, out, json_path=json_path, markdown_path=markdown_path,
            html_path=html_path, junit_path=junit_path,
            otlp=otlp_target(otlp_url, otlp_timeout_s), reanalyse=reanalyse,
        )  # fmt: skip
    finally:
        store.close()
    sys.exit(exit_code(result))
