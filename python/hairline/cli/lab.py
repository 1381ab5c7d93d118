"""``hairline lab process|quota|hosts|factors``: running the lab rather than one
experiment: standalone processors, team quotas, the host inventory, host-fact ANOVA."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import NoReturn

import click
from rich.console import Console
from rich.table import Table

from hairline.cli._base import EXIT_WAITING, console, main
from hairline.cli._options import (
    backend_options,
    chosen_backend,
    esc,
    progress_option,
    store_options,
    wait_option,
    write_json_output,
)
from hairline.cli._outputs import OutputFile
from hairline.cli._waiting import Patience, ProgressOut, duration_text
from hairline.hosts.factors import DEFAULT_MIN_RUNS, FactorAnalysis, factor_analysis
from hairline.hosts.layout import local_layout
from hairline.hosts.listing import HostsJson, inventory
from hairline.hosts.quotas import region_quotas, set_quota
from hairline.hosts.runs import DEFAULT_METRIC
from hairline.kit import interrupts
from hairline.lab.processor import Event, ProcessorOptions, process_next
from hairline.lab.queue import new_owner
from hairline.lab.status import standing
from hairline.store.db import Store, open_store


@main.group()
def lab() -> None:
    """Run the lab: standalone processors, quotas, the host inventory."""


class _Shutdown(BaseException):
    """A processor asked to stop: leave the experiment to be taken over, do not fail it."""


@lab.command()
@store_options
@click.option("--once", is_flag=True, help="Process what is queued now, then exit.")
@click.option("--poll-s", type=click.FloatRange(0.1), default=2.0, show_default=True)
@click.option("--lease-s", type=click.FloatRange(1), default=30.0, show_default=True)
@click.option("--cpus-per-host", type=click.IntRange(1))
@wait_option(0.0, "this processor exits, its experiments left queued")
@progress_option
@backend_options
def process(
    db_url: str | None,
    home: Path,
    once: bool,
    poll_s: float,
    lease_s: float,
    cpus_per_host: int | None,
    wait_s: float,
    progress_mode: str,
    backend: str,
    ray_address: str | None,
) -> None:
    """A standalone processor: claim queued experiments and run them, one at a time.

    SIGTERM or Ctrl-C stops it after stopping its arms; the experiment it held is taken up
    by another processor when the lease runs out (or at once by `hairline run`'s own).
    With --wait-s it exits 3 once every experiment it had has waited that long (for hosts,
    for a Ray head) with no trial ending anywhere.
    """
    out = console()
    shown = ProgressOut(out, progress_mode)
    chosen = chosen_backend(backend, ray_address)
    store = open_store(db_url, home=home)
    owner = new_owner("lab")
    if shown.json:
        shown.emit({"event": "processor", "t": shown.now(), "owner": owner,
                    "db": store.shown_url})  # fmt: skip
    else:
        out.print(f"processor {owner} on {esc(store.shown_url)}")
    steps = 0  # trials ended and experiments finished: each restarts the wait

    def on_event(event: Event) -> None:
        nonlocal steps
        if (event.kind == "trial" and event.trial is not None) or event.kind == "done":
            steps += 1
        if event.kind == "waiting":
            return  # shown by _show_wait, once per reason and then every so often
        if shown.json:
            shown.processor_event(event)
        elif event.kind != "batch":
            out.print(f"[dim]#{event.experiment_id}[/] {event.kind}: {esc(event.message)}")

    # Remembered as well as raised: a _Shutdown that lands in a Popen's after-fork hook is
    # dropped by Python, and the batches raise it again (kit/interrupts.py).
    interrupts.install(exception=_Shutdown)
    options = ProcessorOptions(
        owner=owner, lease_s=lease_s, cpus_per_host=cpus_per_host, on_event=on_event, **chosen
    )
    # Experiments that had to wait for hosts in this round: the ones behind them in the
    # claim order get their turn before the next round starts from the front again.
    waited: dict[int, str] = {}
    shown_waits: dict[int, Patience] = {}  # when to say again that one experiment waits
    patience = Patience(wait_s)  # the processor's: every experiment it had waited
    rounds = 0
    try:
        while True:
            interrupts.raise_if_interrupted()
            experiment_id, outcome = process_next(store, options, skip=waited)
            if experiment_id is not None:
                if outcome == "waiting":
                    waited[experiment_id] = _show_wait(store, experiment_id, shown_waits, shown)
                else:
                    steps += 1
                    shown_waits.pop(experiment_id, None)
                    shown.emit({"event": "outcome", "t": shown.now(),
                                "experiment": experiment_id, "outcome": outcome})  # fmt: skip
                    if not shown.json:
                        out.print(f"#{experiment_id}: {outcome}")
                continue
            if once:
                break
            # A round with nothing waiting (idle, or all done) is not a wait either.
            rounds += 0 if waited else 1
            now = time.monotonic()
            reasons = "; ".join(f"#{e} {r}" for e, r in sorted(waited.items())) or None
            patience.observe(now, mark=(steps, rounds), reason=reasons)
            if patience.expired(now):
                _give_up(sorted(waited), patience, now, out, shown)
            waited.clear()
            time.sleep(poll_s)
    except _Shutdown:
        shown.emit({"event": "stopping", "t": shown.now()})
        out.print("stopping: arms stopped; held experiments will be taken over")
    finally:
        store.close()


def _show_wait(
    store: Store, experiment_id: int, patiences: dict[int, Patience], shown: ProgressOut
) -> str:
    """Show that ``experiment_id`` waits, when that is news; its progress line."""
    where = standing(store, experiment_id)
    patience = patiences.setdefault(experiment_id, Patience(0.0))
    note = patience.observe(
        time.monotonic(), mark=(where.phase, where.trials_ended), reason=where.progress
    )
    if note is not None:
        shown.waiting(note, experiment=experiment_id)
    return where.progress


def _give_up(
    experiment_ids: list[int], patience: Patience, now: float, out: Console, shown: ProgressOut
) -> NoReturn:
    waited = duration_text(patience.waited_s(now))
    shown.emit({"event": "gave_up", "t": shown.now(), "experiments": experiment_ids,
                "reason": patience.reason, "waited_s": round(patience.waited_s(now), 1),
                "wait_s": patience.limit_s, "exit_status": EXIT_WAITING})  # fmt: skip
    listed = ", ".join(f"#{e}" for e in experiment_ids)
    out.print(
        f"[bold yellow]gave up[/] after waiting {waited} with no trial ending: {listed} "
        f"stay queued for another processor ({esc(patience.reason or '')})"
    )
    raise SystemExit(EXIT_WAITING)


@lab.command()
@click.argument("team")
@click.argument("max_hosts", type=click.IntRange(0))
@click.option("--region", help="The quota in this region only (default: over all regions).")
@store_options
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
    where = f" in region {esc(region)}" if region is not None else ""
    console().print(f"team {esc(team)}: at most {max_hosts} hosts at once{where}")


@lab.command()
@store_options
@click.option("--cpus-per-host", type=click.IntRange(1))
@click.option("--json", "as_json", is_flag=True)
def hosts(db_url: str | None, home: Path, cpus_per_host: int | None, as_json: bool) -> None:
    """The host inventory (the CPU sets of machines that ran the local backend and the test
    machines that joined): their class, health and allocation, and the teams' quotas. It
    only reads: this machine's CPU sets are registered by its first local run."""
    # Read-only: a laptop or CI runner listing a shared lab's hosts must not register its own
    # CPU sets there as hosts (it did, before).
    layout = local_layout(sorted(os.sched_getaffinity(0)), cpus_per_host=cpus_per_host)
    store = open_store(db_url, home=home, read_only=True)
    try:
        rows, quotas = inventory(store)
        regional = region_quotas(store)
    finally:
        store.close()
    if as_json:
        listed: HostsJson = {"hosts": rows, "engine_cpus": layout.engine_cpus,
                             "quotas": quotas, "region_quotas": regional}  # fmt: skip
        click.echo(json.dumps(listed, indent=2))
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
            esc(r["name"]), r["backend"], esc(r["region"]), esc(r["server_type"]),
            esc(r["cpu_arch"]), esc(r["cpu_model"]), esc(r["kernel"]), r["turbo"],
            r["cpus"], esc(state),
            f"#{r['experiment']} ({esc(r['team'] or '')})" if r["experiment"] else "",
        )  # fmt: skip
    out = console()
    out.print(table)
    if not rows:
        out.print(
            "no hosts yet: a local run (`hairline run`, `lab process`) registers this "
            "machine's CPU sets; a test machine joins with `hairline agent start`"
        )
    if quotas or regional:
        teams = sorted({*quotas, *regional})
        out.print("quotas: " + "; ".join(
            f"{t} " + ", ".join(
                ([f"{quotas[t]} overall"] if t in quotas else [])
                + [f"{n} in {r}" for r, n in sorted(regional.get(t, {}).items())]
            ) for t in teams))  # fmt: skip


@lab.command()
@store_options
@click.option("--metric", default=DEFAULT_METRIC, show_default=True,
              help="The metric whose variance the host facts should explain.")  # fmt: skip
@click.option("--service", help="Only this service's experiments (default: all).")
@click.option("--min-runs", type=click.IntRange(2), default=DEFAULT_MIN_RUNS, show_default=True,
              help="Fewest runs a CPU model or kernel needs for its CoV.")  # fmt: skip
@click.option("--cov-from", type=click.Choice(["aa", "all"]), default="aa", show_default=True,
              help="The experiments the CoV comes from: A/A only, or A/A and A/B.")  # fmt: skip
@click.option("--json", "json_path", type=OutputFile(),
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
    store = open_store(db_url, home=home, read_only=True)
    try:
        result = factor_analysis(
            store, metric=metric, service=service, min_runs=min_runs,
            cov_kinds=("aa",) if cov_from == "aa" else ("aa", "ab"),
        )  # fmt: skip
    finally:
        store.close()
    _print_factors(result, out)
    if json_path is not None:
        write_json_output(out, json_path, result)


def _print_factors(result: FactorAnalysis, out: Console) -> None:
    def r2(x: float) -> str:
        return "n/a" if x != x else f"{x:.3f}"

    table = Table(
        title=f"R² of {esc(result.metric)} on host facts ({result.runs} runs of "
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
            table.add_row(c.fact, esc(c.value), str(c.runs), str(c.experiments),
                          f"{c.cov * 100:.2f}%")  # fmt: skip
        out.print(table)
        out.print("median CoV: " + ", ".join(
            f"{fact} {p50 * 100:.2f}%" for fact, p50 in result.cov_p50.items()))  # fmt: skip
    for note in result.notes:
        out.print(f"[dim]note: {esc(note)}[/]")
