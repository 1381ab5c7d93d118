"""``hairline run`` and ``hairline aa``: an experiment file into the lab, and its report.

``hairline run FILE`` validates the experiment file, puts the experiment in the durable
queue and, unless ``--no-process``, processes it in this process (claiming it with a lease
like any processor), showing progress; then it prints the report and exits 0 (no
regression), 1 (a regression) or 2 (an error, or the experiment failed).

An experiment that must wait (every matching host held, the Ray head unreachable) is
tried again every 2 s, for at most ``--wait-s`` (default 600 s) without a trial ending;
then ``run`` gives its lease back, says which experiment is still queued and which
command finishes it, and exits 3.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from hairline.cli._base import EXIT_ERROR, EXIT_OK, EXIT_WAITING, console, main
from hairline.cli._options import (
    RUN_WAIT_S,
    backend_options,
    chosen_backend,
    esc,
    otlp_target,
    progress_option,
    report_options,
    store_options,
    wait_option,
)
from hairline.cli._waiting import ProgressOut, duration_text
from hairline.cli.experiments import emit_reports, exit_code
from hairline.config import ExperimentConfig, idle_setting_warnings
from hairline.kit import interrupts
from hairline.lab.drive import DriveSettings, Outcome, drive
from hairline.lab.files import backend_checks, load_experiment_file
from hairline.lab.patience import WaitNote
from hairline.lab.processor import Event
from hairline.lab.queue import enqueue
from hairline.lab.status import Standing
from hairline.store.db import DEFAULT_HOME, Store, open_store

__all__ = ["execute"]


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
    fn = wait_option(RUN_WAIT_S, "the experiment stays queued for `hairline lab process`")(fn)
    fn = progress_option(fn)
    fn = backend_options(fn)
    return click.option("--cpus-per-host", type=click.IntRange(1),
                        help="CPUs per local host (default: half of those left after one "
                        "for the engine).")(fn)  # fmt: skip


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (a CI job cancelled) stops an experiment the same careful way as Ctrl-C."""
    previous = signal.getsignal(signal.SIGTERM)
    interrupts.install((signal.SIGTERM,))
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
    if config.mode_name == "capacity":
        return "capacity mode: each arm's highest rate under its SLO, searched"
    if config.load.rate_per_s is not None:
        return f"{config.load.rate_per_s:g} requests/s"
    if config.load.target_utilization is not None:
        return f"rate calibrated to {config.load.target_utilization:.0%} busy"
    return "rate calibrated: the most precise per minute the lab serves"


class _Display:
    """Progress while an experiment runs: phase lines and a bar over its batches. Waits
    are shown by :class:`~hairline.cli._waiting.Patience`, not once per attempt."""

    def __init__(self, out: Console, config: ExperimentConfig) -> None:
        self.out = out
        rotates = config.design.schedule == "fully-balanced"
        self.batches = config.design.planned_trials * len(config.arms if rotates else [0])
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(),
            TextColumn("{task.completed}/{task.total} batches"), TimeElapsedColumn(),
            console=out, transient=False,
        )  # fmt: skip
        self.task = self.progress.add_task("waiting", total=self.batches, visible=False)
        self._last: tuple[int, str] | None = None

    def __call__(self, event: Event) -> None:
        if event.kind == "waiting":
            return
        if event.kind == "batch":
            self.progress.update(self.task, visible=True, description=event.message)
            key = event.message.split(":")[0]
            if self._last is not None and self._last[1] != key:
                self.progress.advance(self.task)
            self._last = (0, key)
        elif event.kind in ("build", "trial"):
            self.out.print(f"[dim]{esc(event.message)}[/]")
        else:
            if event.kind in ("phase", "done") and self._last is not None:
                self.progress.update(self.task, completed=self.batches)
            self.out.print(f"[bold]{event.kind}[/]: {esc(event.message)}")


def execute(
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
    wait_s: float = 0.0,
    progress: ProgressOut | None = None,
    finish_with: str = "hairline lab process",
    clock: Callable[[], float] = time.monotonic,
    origin: str = "",
) -> int:
    """Queue ``config``, then process it here (or, with ``no_process``, follow it) until it
    ends; its id. Gives up with exit 3 after ``wait_s`` of waiting (0: never). ``origin``
    says what queued it ("bisect": a step of ``hairline bisect``)."""
    shown = progress or ProgressOut(out, "text")
    experiment_id = enqueue(store, config, kind=kind, origin=origin)
    what = "A/A" if kind == "aa" else "A/B"
    out.print(
        f"experiment [bold]{experiment_id}[/] ({what} of {esc(config.service.name)}) queued "
        f"in {esc(store.shown_url)}"
    )
    shown.emit({"event": "queued", "t": shown.now(), "experiment": experiment_id,
                "kind": kind, "service": config.service.name})  # fmt: skip
    take_to_end(
        store, experiment_id, config, no_process=no_process, no_wait=no_wait, lease_s=lease_s,
        cpus_per_host=cpus_per_host, out=out, backend=backend, wait_s=wait_s, progress=shown,
        finish_with=finish_with, clock=clock,
    )  # fmt: skip
    return experiment_id


def take_to_end(
    store: Store,
    experiment_id: int,
    config: ExperimentConfig,
    *,
    no_process: bool,
    no_wait: bool,
    lease_s: float,
    cpus_per_host: int | None,
    out: Console,
    backend: dict[str, Any] | None = None,
    wait_s: float = 0.0,
    progress: ProgressOut | None = None,
    finish_with: str = "hairline lab process",
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Process a queued experiment here (or, with ``no_process``, follow the processors
    that do) until it ends; exit 3 after ``wait_s`` of waiting for hosts (0: never)."""
    shown = progress or ProgressOut(out, "text")
    if no_process and no_wait:
        out.print(f"run `hairline status {experiment_id}` to follow it")
        return
    display = _Display(out, config)
    settings = DriveSettings(
        no_process=no_process, lease_s=lease_s, cpus_per_host=cpus_per_host,
        backend=backend or {}, wait_s=wait_s, clock=clock,
    )  # fmt: skip
    hooks = _Hooks(out, shown, display)
    # Following, a SIGTERM stops only this command: it keeps its default action.
    showing = nullcontext() if shown.json or no_process else display.progress
    with showing, nullcontext() if no_process else _sigterm_as_interrupt():
        outcome = drive(store, experiment_id, settings, hooks)
    if outcome.state == "gave_up":
        _give_up(outcome, out, shown, finish_with)
    if outcome.state == "interrupted":
        if outcome.attempting:
            out.print("[red]interrupted[/]: arms stopped, hosts released, experiment failed")
        else:
            out.print(
                f"[red]interrupted[/] while waiting: experiment {experiment_id} stays "
                f"queued (`hairline cancel {experiment_id}` drops it)"
            )
        raise SystemExit(EXIT_ERROR)


class _Hooks:
    """The drive loop's events as progress lines, the batch bar or JSON events."""

    def __init__(self, out: Console, shown: ProgressOut, display: _Display) -> None:
        self.out, self.shown, self.display = out, shown, display

    def processor_event(self, event: Event) -> None:
        (self.shown.processor_event if self.shown.json else self.display)(event)

    def waiting(self, note: WaitNote, *, experiment: int | None = None) -> None:
        self.shown.waiting(note, experiment=experiment)

    def followed(self, where: Standing, *, experiment: int) -> None:
        self.shown.emit({"event": "progress", "t": self.shown.now(), "experiment": experiment,
                         "phase": where.phase, "progress": where.progress})  # fmt: skip
        if not self.shown.json and not where.waiting:
            self.out.print(f"[dim]{esc(where.phase)}: {esc(where.progress)}[/]")


def _give_up(outcome: Outcome, out: Console, shown: ProgressOut, finish_with: str) -> NoReturn:
    experiment_id = outcome.experiment_id
    shown.emit({"event": "gave_up", "t": shown.now(), "experiment": experiment_id,
                "reason": outcome.reason, "waited_s": round(outcome.waited_s, 1),
                "wait_s": outcome.limit_s, "command": finish_with,
                "exit_status": EXIT_WAITING})  # fmt: skip
    out.print(
        f"[bold yellow]gave up[/] after waiting {duration_text(outcome.waited_s)} "
        f"({esc(outcome.reason)}): experiment {experiment_id} stays queued, held by no "
        f"processor. `{esc(finish_with)}` finishes it; `hairline status {experiment_id}` "
        f"follows it, `hairline report {experiment_id}` reports on it once done, `hairline "
        f"cancel {experiment_id}` drops it."
    )
    raise SystemExit(EXIT_WAITING)


def _finish_with(backend: str, ray_address: str | None, home: Path, db_url: str | None) -> str:
    """The `hairline lab process` that takes up an experiment this command left queued."""
    words = ["hairline lab process"]
    if backend != "local":
        words.append(f"--backend {backend} --ray-address {ray_address}")
    if db_url:
        words.append("--db URL")  # the URL may hold a password: not in a CI log
    elif home != DEFAULT_HOME:
        words.append(f"--home {home}")
    return " ".join(words)


def _suggest_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    path = click.Path(path_type=Path)
    fn = click.option("--suggest-base", metavar="REV", help="With --suggested-by: the revision "
                      "it is compared with (default: [suggest] base, else REV^).")(fn)  # fmt: skip
    fn = click.option("--suggest-repo", type=path, help="With --suggested-by: the git "
                      "repository (default: [suggest] repo).")(fn)  # fmt: skip
    fn = click.option("--suggest-profile", "suggest_profiles", multiple=True, type=path,
                      help="With --suggested-by: a profile of production (default: [suggest] "
                      "profiles). Repeatable.")(fn)  # fmt: skip
    return click.option(
        "--suggested-by", metavar="REV",
        help="Replay only the endpoints whose code REV modifies, in their shares of its "
        "production cost (docs/suggest.md); nothing to test exits 0.",
    )(fn)  # fmt: skip


def _narrowed(
    config: ExperimentConfig,
    out: Console,
    home: Path,
    head: str | None,
    profiles: tuple[Path, ...],
    repo: Path | None,
    base: str | None,
) -> ExperimentConfig:
    """The experiment on the trace the suggested change reaches; exit 0 when it reaches
    nothing worth testing."""
    from hairline.suggest.plan import suggested_experiment

    narrowed, found = suggested_experiment(
        config, head=head, out_dir=home / "suggest", profiles=profiles, repo=repo, base=base
    )
    if narrowed is None or narrowed.suggest is None or narrowed.suggest.why is None:
        out.print(f"[bold]nothing to test[/]: {esc(found.reason)}")
        sys.exit(EXIT_OK)
    why = narrowed.suggest.why
    shares = ", ".join(f"{e.endpoint} {e.share:.1%}" for e in why.endpoints)
    out.print(
        f"suggested by {esc(found.head)}: {len(why.functions)} modified functions, impact "
        f"{why.share:.3%} of the profile; replaying {esc(shares)}"
    )
    return narrowed


def _lab_command(kind: str) -> Callable[..., None]:
    def command(
        file: Path,
        db_url: str | None,
        home: Path,
        check: bool,
        no_process: bool,
        no_wait: bool,
        lease_s: float,
        wait_s: float,
        progress_mode: str,
        cpus_per_host: int | None,
        priority: int | None,
        backend: str,
        ray_address: str | None,
        json_path: Path | None,
        markdown_path: Path | None,
        html_path: Path | None,
        junit_path: Path | None,
        otlp_url: str | None,
        otlp_timeout_s: float,
        suggested_by: str | None = None,
        suggest_profiles: tuple[Path, ...] = (),
        suggest_repo: Path | None = None,
        suggest_base: str | None = None,
    ) -> None:
        out = console(json_path, markdown_path, junit_path)
        # --check with --backend ray checks what that backend needs of the files too.
        config = load_experiment_file(file, checks=backend_checks(backend))
        if priority is not None:
            config = config.model_copy(update={"priority": priority})
        if kind == "ab" and (suggested_by or (config.suggest and config.suggest.head)):
            config = _narrowed(config, out, home, suggested_by, suggest_profiles,
                               suggest_repo, suggest_base)  # fmt: skip
        if check:
            for warning in idle_setting_warnings(config):
                out.print(f"[yellow]warning[/]: {esc(warning)}", soft_wrap=True)
            out.print(
                f"{esc(str(file))}: ok ({config.service.name}, arms "
                f"{', '.join(config.arms)}, {_trials_text(config)}, {config.design.schedule}, "
                f"{_rate_text(config)})",
                soft_wrap=True,
            )
            sys.exit(EXIT_OK)
        options = chosen_backend(backend, ray_address)
        store = open_store(db_url, home=home)
        try:
            experiment_id = execute(
                config, kind=kind, store=store, no_process=no_process, no_wait=no_wait,
                lease_s=lease_s, cpus_per_host=cpus_per_host, out=out, backend=options,
                wait_s=wait_s, progress=ProgressOut(out, progress_mode),
                finish_with=_finish_with(backend, ray_address, home, db_url),
            )  # fmt: skip
            if no_process and no_wait:
                sys.exit(EXIT_OK)
            report = emit_reports(
                store, experiment_id, out,
                json_path=json_path, markdown_path=markdown_path, html_path=html_path,
                junit_path=junit_path, otlp=otlp_target(otlp_url, otlp_timeout_s),
            )  # fmt: skip
        finally:
            store.close()
        sys.exit(exit_code(report))

    return command


_RUN_HELP = f"""Run an A/B experiment file: build, allocate hosts, run the trials, analyse.

Exit status: 0 no regression, 1 a regression, 2 an error (or the experiment failed), 3
gave up waiting for hosts or a Ray head (--wait-s, default {RUN_WAIT_S:g} s): the
experiment stays queued for `hairline lab process`.
"""
_AA_HELP = f"""Run an A/A experiment (the baseline on every arm) and keep it as history.

The service's A/A runs are what adaptive model selection and the CI test learn from.
Exit status: 0 done, 2 an error (or the experiment failed), 3 gave up waiting (--wait-s,
default {RUN_WAIT_S:g} s).
"""

for _name, _kind, _help in (("run", "ab", _RUN_HELP), ("aa", "aa", _AA_HELP)):
    _fn = _lab_command(_kind)
    _fn.__doc__ = _help
    _fn = report_options(_run_options(store_options(_fn)))
    if _kind == "ab":
        _fn = _suggest_options(_fn)
    _fn = click.argument("file", type=click.Path(dir_okay=False, path_type=Path))(_fn)
    main.command(name=_name, help=_help)(_fn)
