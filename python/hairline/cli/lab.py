"""The lab's commands: run, aa, status, report, demo, and ``lab process|quota|hosts|factors``.

``hairline run FILE`` validates the experiment file, puts the experiment in the durable
queue and, unless ``--no-process``, processes it in this process (claiming it with a lease
like any processor), showing progress; then it prints the report and exits 0 (no
regression), 1 (a regression) or 2 (an error, or the experiment failed).
"""

from __future__ import annotations

import importlib.util
import json
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from hairline.cli._base import EXIT_ERROR, EXIT_OK, EXIT_REGRESSION, console, main
from hairline.config import ExperimentConfig
from hairline.errors import ConfigError
from hairline.hosts.agent import ray_environment
from hairline.hosts.factors import (
    DEFAULT_METRIC,
    DEFAULT_MIN_RUNS,
    FactorAnalysis,
    factor_analysis,
)
from hairline.hosts.inventory import ensure_local_hosts, inventory
from hairline.hosts.quotas import region_quotas, set_quota
from hairline.lab.demo import demo_config
from hairline.lab.files import load_experiment_file
from hairline.lab.processor import Event, ProcessorOptions, process_experiment, process_next
from hairline.lab.queue import enqueue, new_owner, request_cancel
from hairline.lab.status import artifacts_dir, experiment_rows, phase_of
from hairline.report.context import ExperimentReport, experiment_json
from hairline.report.experiment import load_report
from hairline.report.html import render_html
from hairline.report.jsonout import to_jsonable, write_json
from hairline.report.markdown import append_step_summary, render_markdown
from hairline.report.terminal import print_experiment
from hairline.store.db import DEFAULT_HOME, Store, open_store
from hairline.store.models import (
    TERMINAL_PHASES,
)


def _store_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option(
        "--db",
        "db_url",
        metavar="URL",
        help="Database URL (default $HAIRLINE_DB, else SQLite in --home).",
    )(fn)
    return click.option(
        "--home",
        type=click.Path(file_okay=False, path_type=Path),
        default=DEFAULT_HOME,
        show_default=True,
        help="Folder for the SQLite database, builds and experiment artifacts.",
    )(fn)


def _report_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
                      help="Write the report as JSON ('-' for stdout).")(fn)  # fmt: skip
    md_path = click.Path(dir_okay=False, path_type=Path)
    fn = click.option("--markdown", "markdown_path", type=md_path,
                      help="Write a Markdown report ('-' for stdout); also appended to "
                      "$GITHUB_STEP_SUMMARY when that is set.")(fn)  # fmt: skip
    return click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path),
                        help="Copy the self-contained HTML report here.")(fn)  # fmt: skip


def _run_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option("--check", is_flag=True, help="Validate the files and stop.")(fn)
    fn = click.option(
        "--priority", type=click.IntRange(-1000, 1000), default=None,
        help="Higher is claimed first by the lab's processors (default: the file's "
        "priority, else 0).",
    )(fn)  # fmt: skip
    fn = click.option(
        "--no-process", is_flag=True,
        help="Only enqueue; a `hairline lab process` elsewhere runs it (then wait for it).",
    )(fn)  # fmt: skip
    fn = click.option("--no-wait", is_flag=True, help="With --no-process: do not wait.")(fn)
    fn = click.option("--lease-s", type=click.FloatRange(1), default=30.0, show_default=True,
                      help="Lease length; another processor takes over this long after a "
                      "crash.")(fn)  # fmt: skip
    fn = _backend_options(fn)
    return click.option("--cpus-per-host", type=click.IntRange(1),
                        help="CPUs per local host (default: half of those left after one "
                        "for the engine).")(fn)  # fmt: skip


def _backend_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option("--backend", type=click.Choice(["local", "ray"]), default="local",
                      show_default=True,
                      help="Where arms run: this machine's CPU sets, or test machines that "
                      "joined with `hairline agent start` (docs/scale-out.md).")(fn)  # fmt: skip
    return click.option("--ray-address", metavar="HOST:PORT", envvar="RAY_ADDRESS",
                        help="With --backend ray: the head ($RAY_ADDRESS).")(fn)  # fmt: skip


def _backend(backend: str, ray_address: str | None) -> dict[str, Any]:
    """The processor options of ``--backend``; the Ray head and token checked up front."""
    if backend == "local":
        return {}
    if not ray_address:
        raise ConfigError(
            "--backend ray needs the Ray head's address",
            hint="pass --ray-address HOST:PORT (or set RAY_ADDRESS)",
        )
    if importlib.util.find_spec("ray") is None:
        raise ConfigError(
            "--backend ray: Ray is not installed in this Python",
            hint="pip install 'hairline[ray]' (make build installs it)",
        )
    ray_environment()  # a token file others may read is refused before anything runs
    return {"backend": backend, "ray_address": ray_address}


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (a CI job cancelled) stops an experiment the same careful way as Ctrl-C."""

    def handler(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _trials_text(config: ExperimentConfig) -> str:
    design = config.design
    if design.sequential:
        return f"trials until settled (at most {design.max_trials})"
    return f"{design.trials} trials"


def _rate_text(config: ExperimentConfig) -> str:
    if config.load.rate_per_s is not None:
        return f"{config.load.rate_per_s:g} requests/s"
    return f"rate calibrated to {config.load.target_utilization:.0%} busy"


class _Display:
    """Progress while an experiment runs: phase lines and a bar over its batches."""

    def __init__(self, out: Console, config: ExperimentConfig) -> None:
        self.out = out
        rotates = config.design.name == "fully-balanced" and config.design.mode != "hardware"
        self.batches = config.design.planned_trials * len(config.arms if rotates else [0])
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(),
            TextColumn("{task.completed}/{task.total} batches"), TimeElapsedColumn(),
            console=out, transient=False,
        )  # fmt: skip
        self.task = self.progress.add_task("waiting", total=self.batches, visible=False)
        self._last: tuple[int, str] | None = None

    def __call__(self, event: Event) -> None:
        if event.kind == "batch":
            self.progress.update(self.task, visible=True, description=event.message)
            key = event.message.split(":")[0]
            if self._last is not None and self._last[1] != key:
                self.progress.advance(self.task)
            self._last = (0, key)
        elif event.kind in ("build", "trial"):
            self.out.print(f"[dim]{_esc(event.message)}[/]")
        else:
            if event.kind in ("phase", "done") and self._last is not None:
                self.progress.update(self.task, completed=self.batches)
            self.out.print(f"[bold]{event.kind}[/]: {_esc(event.message)}")


def _esc(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _execute(
    config: ExperimentConfig,
    *,
    kind: str,
    store: Store,
    no_process: bool,
    no_wait: bool,
    lease_s: float,
    cpus_per_host: int | None,
    out: Console,
    backend: dict[str, Any] | None = None,
) -> int:
    experiment_id = enqueue(store, config, kind=kind)
    what = "A/A" if kind == "aa" else "A/B"
    out.print(
        f"experiment [bold]{experiment_id}[/] ({what} of {_esc(config.service.name)}) queued "
        f"in {_esc(store.url)}"
    )
    if no_process:
        if no_wait:
            out.print(f"run `hairline status {experiment_id}` to follow it")
            return experiment_id
        _wait_terminal(store, experiment_id, out)
        return experiment_id
    display = _Display(out, config)
    options = ProcessorOptions(
        owner=new_owner("run"), lease_s=lease_s, cpus_per_host=cpus_per_host, on_event=display,
        **(backend or {}),
    )  # fmt: skip
    with display.progress, _sigterm_as_interrupt():
        try:
            while True:
                outcome = process_experiment(store, experiment_id, options)
                if outcome == "waiting" or outcome == "none":
                    if outcome == "none" and phase_of(store, experiment_id)[0] in TERMINAL_PHASES:
                        break
                    time.sleep(2.0)
                    continue
                break
        except KeyboardInterrupt:
            out.print("[red]interrupted[/]: arms stopped, hosts released, experiment failed")
            raise SystemExit(EXIT_ERROR) from None
    return experiment_id


def _wait_terminal(store: Store, experiment_id: int, out: Console) -> None:
    last = ""
    while True:
        phase, progress = phase_of(store, experiment_id)
        if progress != last:
            out.print(f"[dim]{_esc(phase)}: {_esc(progress)}[/]")
            last = progress
        if phase in TERMINAL_PHASES:
            return
        time.sleep(1.0)


def _emit_reports(
    store: Store,
    experiment_id: int,
    out: Console,
    *,
    json_path: Path | None,
    markdown_path: Path | None,
    html_path: Path | None,
    reanalyse: bool = False,
) -> ExperimentReport:
    report = load_report(store, experiment_id, reanalyse=reanalyse)
    artifacts = artifacts_dir(store, experiment_id)
    html_file = artifacts / "report.html"
    report = _with_html(report, html_file)
    html_file.parent.mkdir(parents=True, exist_ok=True)
    html_file.write_text(render_html(report))
    if html_path is not None:
        html_path.write_text(html_file.read_text())
        report = _with_html(report, html_path.resolve())
    print_experiment(report, out)
    markdown = render_markdown(report)
    if markdown_path is not None:
        if str(markdown_path) == "-":
            click.echo(markdown)
        else:
            markdown_path.write_text(markdown)
            out.print(f"wrote {markdown_path}")
    summary = append_step_summary(markdown)
    if summary is not None:
        out.print(f"appended the report to {summary}")
    if json_path is not None:
        if str(json_path) == "-":
            click.echo(json.dumps(experiment_json(report), indent=2, default=str))
        else:
            write_json(json_path, experiment_json(report))
            out.print(f"wrote {json_path}")
    out.print(f"HTML report: {report.html_path}")
    return report


def _with_html(report: ExperimentReport, path: Path) -> ExperimentReport:
    import dataclasses

    return dataclasses.replace(report, html_path=path)


def _exit_code(report: ExperimentReport) -> int:
    if report.phase != "done":
        return EXIT_ERROR
    if report.kind == "aa":
        return EXIT_OK
    if report.analysis is not None and report.analysis.regressions:
        return EXIT_REGRESSION
    return EXIT_OK


def _lab_command(kind: str) -> Callable[..., None]:
    def command(
        file: Path,
        db_url: str | None,
        home: Path,
        check: bool,
        no_process: bool,
        no_wait: bool,
        lease_s: float,
        cpus_per_host: int | None,
        priority: int | None,
        backend: str,
        ray_address: str | None,
        json_path: Path | None,
        markdown_path: Path | None,
        html_path: Path | None,
    ) -> None:
        out = console(json_path, markdown_path)
        config = load_experiment_file(file)
        if priority is not None:
            config = config.model_copy(update={"priority": priority})
        if check:
            out.print(
                f"{_esc(str(file))}: ok ({config.service.name}, arms "
                f"{', '.join(config.arms)}, {_trials_text(config)}, {config.design.name}, "
                f"{_rate_text(config)})"
            )
            sys.exit(EXIT_OK)
        options = _backend(backend, ray_address)
        store = open_store(db_url, home=home)
        try:
            experiment_id = _execute(
                config, kind=kind, store=store, no_process=no_process, no_wait=no_wait,
                lease_s=lease_s, cpus_per_host=cpus_per_host, out=out, backend=options,
            )  # fmt: skip
            if no_process and no_wait:
                sys.exit(EXIT_OK)
            report = _emit_reports(
                store, experiment_id, out,
                json_path=json_path, markdown_path=markdown_path, html_path=html_path,
            )  # fmt: skip
        finally:
            store.close()
        sys.exit(_exit_code(report))

    return command


_RUN_HELP = """Run an A/B experiment file: build, allocate hosts, run the trials, analyse.

Exit status: 0 no regression, 1 a regression, 2 an error (or the experiment failed).
"""
_AA_HELP = """Run an A/A experiment (the baseline on every arm) and keep it as history.

The service's A/A runs are what adaptive model selection and the CI test learn from.
Exit status: 0 done, 2 an error (or the experiment failed).
"""

for _name, _kind, _help in (("run", "ab", _RUN_HELP), ("aa", "aa", _AA_HELP)):
    _fn = _lab_command(_kind)
    _fn.__doc__ = _help
    _fn = _report_options(_run_options(_store_options(_fn)))
    _fn = click.argument("file", type=click.Path(dir_okay=False, path_type=Path))(_fn)
    main.command(name=_name, help=_help)(_fn)


@main.command()
@click.argument("experiment_id", type=int)
@_store_options
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
@_store_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def status(experiment_id: int | None, db_url: str | None, home: Path, as_json: bool) -> None:
    """List experiments, or show one."""
    out = console()
    store = open_store(db_url, home=home)
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
            _esc(str(r["failure"] or r["progress"]))[:80],
        )  # fmt: skip
    out.print(table)


@main.command()
@click.argument("experiment_id", type=int)
@_store_options
@_report_options
@click.option("--reanalyse", is_flag=True,
              help="Analyse the trials again instead of reading the stored analysis.")  # fmt: skip
def report(
    experiment_id: int,
    db_url: str | None,
    home: Path,
    json_path: Path | None,
    markdown_path: Path | None,
    html_path: Path | None,
    reanalyse: bool,
) -> None:
    """Report on one experiment (terminal, and --json/--markdown/--html).

    Exit status as for `hairline run`: 0 no regression, 1 a regression, 2 failed/unfinished.
    """
    out = console(json_path, markdown_path)
    store = open_store(db_url, home=home)
    try:
        result = _emit_reports(
            store, experiment_id, out, json_path=json_path, markdown_path=markdown_path,
            html_path=html_path, reanalyse=reanalyse,
        )  # fmt: skip
    finally:
        store.close()
    sys.exit(_exit_code(result))


@main.group()
def lab() -> None:
    """Run the lab: standalone processors, quotas, the host inventory."""


class _Shutdown(BaseException):
    """A processor asked to stop: leave the experiment to be taken over, do not fail it."""


@lab.command()
@_store_options
@click.option("--once", is_flag=True, help="Process what is queued now, then exit.")
@click.option("--poll-s", type=click.FloatRange(0.1), default=2.0, show_default=True)
@click.option("--lease-s", type=click.FloatRange(1), default=30.0, show_default=True)
@click.option("--cpus-per-host", type=click.IntRange(1))
@_backend_options
def process(
    db_url: str | None,
    home: Path,
    once: bool,
    poll_s: float,
    lease_s: float,
    cpus_per_host: int | None,
    backend: str,
    ray_address: str | None,
) -> None:
    """A standalone processor: claim queued experiments and run them, one at a time.

    SIGTERM or Ctrl-C stops it after stopping its arms; the experiment it held is taken up
    by another processor when the lease runs out (or at once by `hairline run`'s own).
    """
    out = console()
    chosen = _backend(backend, ray_address)
    store = open_store(db_url, home=home)
    owner = new_owner("lab")
    out.print(f"processor {owner} on {_esc(store.url)}")

    def on_event(event: Event) -> None:
        if event.kind != "batch":
            out.print(f"[dim]#{event.experiment_id}[/] {event.kind}: {_esc(event.message)}")

    def stop(_signum: int, _frame: FrameType | None) -> None:
        raise _Shutdown

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    options = ProcessorOptions(
        owner=owner, lease_s=lease_s, cpus_per_host=cpus_per_host, on_event=on_event, **chosen
    )
    # Experiments that had to wait for hosts in this round: the ones behind them in the
    # claim order get their turn before the next round starts from the front again.
    waited: set[int] = set()
    try:
        while True:
            experiment_id, outcome = process_next(store, options, skip=waited)
            if experiment_id is not None:
                out.print(f"#{experiment_id}: {outcome}")
                if outcome == "waiting":
                    waited.add(experiment_id)
                continue
            if once:
                break
            waited.clear()
            time.sleep(poll_s)
    except _Shutdown:
        out.print("stopping: arms stopped; held experiments will be taken over")
    finally:
        store.close()


@lab.command()
@click.argument("team")
@click.argument("max_hosts", type=click.IntRange(0))
@click.option("--region", help="The quota in this region only (default: over all regions).")
@_store_options
def quota(team: str, max_hosts: int, region: str | None, db_url: str | None, home: Path) -> None:
    """Set the most hosts TEAM may hold at once, overall or in one --region.

    An experiment's hosts all come from one region: the one where its team has the most
    quota left (its region quota, never more than its overall quota). A team without a
    quota may use every host.
    """
    store = open_store(db_url, home=home)
    try:
        set_quota(store, team, max_hosts, region=region)
    finally:
        store.close()
    where = f" in region {_esc(region)}" if region is not None else ""
    console().print(f"team {_esc(team)}: at most {max_hosts} hosts at once{where}")


@lab.command()
@_store_options
@click.option("--cpus-per-host", type=click.IntRange(1))
@click.option("--json", "as_json", is_flag=True)
def hosts(db_url: str | None, home: Path, cpus_per_host: int | None, as_json: bool) -> None:
    """The host inventory (this machine's CPU sets and the test machines that joined):
    their class, health and allocation, and the teams' quotas."""
    store = open_store(db_url, home=home)
    try:
        layout = ensure_local_hosts(store, cpus_per_host=cpus_per_host)
        rows, quotas = inventory(store)
        regional = region_quotas(store)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps({"hosts": rows, "engine_cpus": layout.engine_cpus,
                               "quotas": quotas, "region_quotas": regional}, indent=2))  # fmt: skip
        return
    table = Table(title=f"hosts (engine on CPUs {list(layout.engine_cpus) or 'shared'})")
    for col in ("name", "backend", "region", "server type", "arch", "cpu model", "kernel",
                "turbo", "cpus", "state", "allocated to"):  # fmt: skip
        table.add_column(col)
    for r in rows:
        state = "enabled" if r["enabled"] else "disabled"
        if not r["healthy"]:
            state = "unhealthy" + (f": {r['health_note']}" if r["health_note"] else "")
        table.add_row(
            _esc(r["name"]), r["backend"], _esc(r["region"]), _esc(r["server_type"]),
            _esc(r["cpu_arch"]), _esc(r["cpu_model"]), _esc(r["kernel"]), r["turbo"],
            r["cpus"], _esc(state),
            f"#{r['experiment']} ({_esc(r['team'] or '')})" if r["experiment"] else "",
        )  # fmt: skip
    out = console()
    out.print(table)
    if quotas or regional:
        teams = sorted({*quotas, *regional})
        out.print("quotas: " + "; ".join(
            f"{t} " + ", ".join(
                ([f"{quotas[t]} overall"] if t in quotas else [])
                + [f"{n} in {r}" for r, n in sorted(regional.get(t, {}).items())]
            ) for t in teams))  # fmt: skip


@lab.command()
@_store_options
@click.option("--metric", default=DEFAULT_METRIC, show_default=True,
              help="The metric whose variance the host facts should explain.")  # fmt: skip
@click.option("--service", help="Only this service's experiments (default: all).")
@click.option("--min-runs", type=click.IntRange(2), default=DEFAULT_MIN_RUNS, show_default=True,
              help="Fewest runs a CPU model or kernel needs for its CoV.")  # fmt: skip
@click.option("--cov-from", type=click.Choice(["aa", "all"]), default="aa", show_default=True,
              help="The experiments the CoV comes from: A/A only, or A/A and A/B.")  # fmt: skip
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the analysis as JSON ('-' for stdout).")  # fmt: skip
def factors(
    db_url: str | None,
    home: Path,
    metric: str,
    service: str | None,
    min_runs: int,
    cov_from: str,
    json_path: Path | None,
) -> None:
    """Which host facts explain a metric's variance, over the stored runs (ANOVA).

    Fits the metric of every stored run, normalised by its experiment's mean, on the facts
    of its host (server type, CPU arch and model, kernel, region, turbo, ...): R² with all
    facts, the best subsets of one to three, and the coefficient of variation of each CPU
    model and kernel in A/A runs (ServiceLab section 4.1). Exit status 2 when there are no
    runs or too few to fit.
    """
    out = console(json_path)
    store = open_store(db_url, home=home)
    try:
        result = factor_analysis(
            store, metric=metric, service=service, min_runs=min_runs,
            cov_kinds=("aa",) if cov_from == "aa" else ("aa", "ab"),
        )  # fmt: skip
    finally:
        store.close()
    _print_factors(result, out)
    if json_path is not None:
        if str(json_path) == "-":
            click.echo(json.dumps(to_jsonable(result), indent=2))
        else:
            write_json(json_path, result)
            out.print(f"wrote {json_path}")


def _print_factors(result: FactorAnalysis, out: Console) -> None:
    def r2(x: float) -> str:
        return "n/a" if x != x else f"{x:.3f}"

    table = Table(
        title=f"R² of {_esc(result.metric)} on host facts ({result.runs} runs of "
        f"{result.experiments} experiments, each normalised by its experiment's mean)"
    )
    for col in ("factors", "R²", "adjusted R²"):
        table.add_column(col, justify="left" if col == "factors" else "right")
    table.add_row(f"all {len(result.factors)}: " + ", ".join(result.factors),
                  r2(result.r2), r2(result.r2_adj), style="bold")  # fmt: skip
    for subset in result.best:
        if len(subset.factors) < len(result.factors):
            table.add_row(f"best {len(subset.factors)}: " + ", ".join(subset.factors),
                          r2(subset.r2), r2(subset.r2_adj))  # fmt: skip
    out.print(table)
    table = Table(title="each factor: alone, and beyond the others (type II ANOVA)")
    for col in ("factor", "levels", "R² alone", "share beyond others", "F", "p"):
        table.add_column(col, justify="left" if col == "factor" else "right")
    for e in result.effects:
        table.add_row(e.factor, str(e.levels), r2(e.r2_alone), r2(e.share),
                      "n/a" if e.f_value != e.f_value else f"{e.f_value:.3g}",
                      "n/a" if e.p_value != e.p_value else f"{e.p_value:.3g}")  # fmt: skip
    out.print(table)
    if result.cov:
        kinds = " and ".join("A/A" if k == "aa" else "A/B" for k in result.cov_kinds)
        table = Table(title=f"coefficient of variation (sd / mean) per CPU model and kernel, "
                      f"{kinds} runs, noisiest first")  # fmt: skip
        for col in ("fact", "value", "runs", "experiments", "CoV"):
            table.add_column(col, justify="left" if col in ("fact", "value") else "right")
        for c in result.cov:
            table.add_row(c.fact, _esc(c.value), str(c.runs), str(c.experiments),
                          f"{c.cov * 100:.2f}%")  # fmt: skip
        out.print(table)
        out.print("median CoV: " + ", ".join(
            f"{fact} {p50 * 100:.2f}%" for fact, p50 in result.cov_p50.items()))  # fmt: skip
    for note in result.notes:
        out.print(f"[dim]note: {_esc(note)}[/]")


@main.command()
@click.option("--regress-cpu", type=click.FloatRange(0, 1), default=0.05, show_default=True)
@click.option("--trials", type=click.IntRange(1), default=7, show_default=True)
@click.option("--duration-s", type=click.FloatRange(1), default=4.0, show_default=True)
@click.option("--rate", "rate_per_s", type=click.FloatRange(1), default=None,
              help="Replay rate; default: calibrated so the baseline is 60% busy.")  # fmt: skip
@_store_options
@_report_options
def demo(
    regress_cpu: float,
    trials: int,
    duration_s: float,
    rate_per_s: float | None,
    db_url: str | None,
    home: Path,
    json_path: Path | None,
    markdown_path: Path | None,
    html_path: Path | None,
) -> None:
    """A/B of the bundled sample service with a CPU regression injected into B.

    Runs examples/sample-service/experiment.toml through the lab (queue, hosts, trials,
    analysis, reports). Exit status: 0 when the verdict is true to what was injected (the
    regression caught; with --regress-cpu 0, nothing flagged), 1 when it is not, 2 on an
    error.
    """
    out = console(json_path, markdown_path)
    config = demo_config(
        regress_cpu=regress_cpu, trials=trials, duration_s=duration_s, rate_per_s=rate_per_s
    )
    out.print(
        f"[bold]hairline demo[/]: sample service A against B with {regress_cpu:.0%} more CPU "
        f"per request; {trials} trials x 2 batches (fully balanced), {duration_s:g} s at "
        + (f"{rate_per_s:g} requests/s" if rate_per_s else "a rate calibrated to 60% busy")
        + " each, arms on their own CPUs, replayed in lockstep."
    )
    store = open_store(db_url, home=home)
    try:
        experiment_id = _execute(
            config, kind="ab", store=store, no_process=False, no_wait=False, lease_s=30.0,
            cpus_per_host=None, out=out,
        )  # fmt: skip
        report = _emit_reports(
            store, experiment_id, out,
            json_path=json_path, markdown_path=markdown_path, html_path=html_path,
        )  # fmt: skip
    finally:
        store.close()
    if report.phase != "done":
        sys.exit(EXIT_ERROR)
    flagged = report.analysis is not None and any(
        r.metric == "cpu_ns_per_request" and r.verdict.label == "regression"
        for r in report.analysis.results
    )
    ok, message = demo_outcome(regress_cpu, flagged)
    out.print(("[bold green]" if ok else "[bold red]") + message)
    sys.exit(EXIT_OK if ok else EXIT_REGRESSION)


def demo_outcome(regress_cpu: float, flagged: bool) -> tuple[bool, str]:
    """The demo's one contract: it passes (exit 0) when hairline told the truth about what
    was injected: the regression flagged when there was one, nothing flagged when
    ``--regress-cpu 0``. Exit 1 otherwise (a miss or a false alarm), 2 on an error."""
    if regress_cpu > 0:
        if flagged:
            return True, f"caught[/]: the {regress_cpu:.0%} CPU regression in B was flagged."
        return False, f"missed[/]: the {regress_cpu:.0%} CPU regression was not flagged."
    if flagged:
        return False, "false alarm[/]: nothing was injected, yet a CPU regression was flagged."
    return True, "correct[/]: nothing was injected and nothing was flagged."
