"""``hairline tune FILE``: a service's configuration searched with A/B tests as the objective
(docs/tuning.md); ``hairline tuning list`` and ``hairline tuning show RUN...``.

Each evaluation is an A/B experiment queued with ``origin="tune"`` and processed here as
``hairline run`` processes it (or, with ``--no-process``, by the lab's processors, several at
once where hosts allow). Exit status: 0 the run ended (its best configuration is written),
2 an error (the run is kept: ``--resume RUN`` goes on from it), 3 gave up waiting for hosts.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

import click
from rich.console import Console

from hairline.cli._base import EXIT_ERROR, console, main
from hairline.cli._options import (
    RUN_WAIT_S,
    backend_options,
    chosen_backend,
    document_options,
    esc,
    store_options,
    wait_option,
)
from hairline.cli._outputs import OutputFolder, write_output
from hairline.cli.experiments import write_documents
from hairline.cli.run import take_to_end
from hairline.config import ExperimentConfig
from hairline.errors import ConfigError
from hairline.kit.jsonout import to_jsonable
from hairline.lab.queue import enqueue
from hairline.store.db import Store, open_store
from hairline.tune import runs
from hairline.tune.apply import render_file
from hairline.tune.config import TuningSpec, load_tuning_file
from hairline.tune.loop import Lab, run_tuning
from hairline.tune.report import print_tuning, render_tuning_html, render_tuning_markdown
from hairline.tune.results import TuningResult, deploy_toml
from hairline.tune.searchers import SEARCHERS

__all__: list[str] = []


def _result(store: Store, run_id: int) -> TuningResult:
    """The run as it stands now: a killed driver's run and its unwatched evaluations shown
    as such (TuningResult.as_seen), without writing (the readers open the store read-only)."""
    run = TuningResult(runs.load_run(store, run_id), tuple(runs.evaluations(store, run_id)))
    return run.as_seen(time.time())


def _overridden(spec: TuningSpec, searcher: str | None, evaluations: int | None) -> TuningSpec:
    if evaluations is not None and evaluations < 1:
        raise ConfigError(
            f"--evaluations {evaluations}: a tuning run evaluates at least one configuration",
            hint="give --evaluations 1 or more",
        )
    size = spec.space.size()
    if evaluations is not None and size is not None and evaluations > size - 1:
        raise ConfigError(
            f"--evaluations {evaluations}: the space has only {size - 1} configurations "
            "besides the default",
            hint=f"give --evaluations {size - 1} or fewer",
        )
    changes: dict[str, object] = {}
    if searcher is not None:
        changes["searcher"] = searcher
        if searcher == "grid" and evaluations is None and size is not None:
            changes["evaluations"] = size - 1
    if evaluations is not None:
        changes["evaluations"] = evaluations
    return dataclasses.replace(spec, **changes)  # type: ignore[arg-type]


@main.command(name="tune")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--resume",
    "resume_id",
    type=int,
    metavar="RUN",
    help="Go on with tuning run RUN (started from the same files) where it stopped.",
)
@click.option("--check", is_flag=True, help="Check the tuning file and exit.")
@click.option(
    "--searcher", type=click.Choice(SEARCHERS), help="Override the file's [search] searcher."
)
@click.option(
    "--evaluations", type=int, metavar="N", help="Override the file's [search] evaluations."
)
@click.option(
    "--output",
    "output_dir",
    type=OutputFolder("it writes best.toml and the rendered configuration file"),
    help="Write the best configuration here: best.toml, and the rendered "
    "configuration file when the tuning file has [apply.file].",
)
@document_options
@click.option(
    "--no-process",
    is_flag=True,
    help="Queue each batch's experiments and wait for the lab's processors (they "
    "run in parallel where hosts allow) instead of processing them here.",
)
@click.option(
    "--cpus-per-host",
    type=click.IntRange(1),
    help="CPUs per local host (default: as `hairline run`).",
)
@wait_option(RUN_WAIT_S, "the evaluation's experiment stays queued")
@backend_options
@store_options
def tune_command(
    file: Path,
    resume_id: int | None,
    check: bool,
    searcher: str | None,
    evaluations: int | None,
    output_dir: Path | None,
    json_path: Path | None,
    markdown_path: Path | None,
    html_path: Path | None,
    no_process: bool,
    cpus_per_host: int | None,
    wait_s: float,
    backend: str,
    ray_address: str | None,
    db_url: str | None,
    home: Path,
) -> None:
    """Search FILE's parameters for the configuration that does best on its objective, each
    candidate judged by an A/B experiment against the default configuration (docs/tuning.md).
    Exit status: 0 done, 2 an error (resumable with --resume), 3 gave up waiting for hosts."""
    out = console(json_path, markdown_path)
    spec = _overridden(load_tuning_file(file), searcher, evaluations)
    if check:
        out.print(
            f"{esc(str(file))}: ok ({len(spec.space.params)} parameters, "
            f"{spec.searcher}, {spec.evaluations} evaluations)",
            soft_wrap=True,
        )
        return
    options = chosen_backend(backend, ray_address)
    store = open_store(db_url, home=home)
    queued: dict[int, ExperimentConfig] = {}

    def queue(config: ExperimentConfig, kind: str) -> int:
        experiment_id = enqueue(store, config, kind=kind, origin="tune")
        queued[experiment_id] = config
        return experiment_id

    def finish(experiment_id: int) -> None:
        config = queued.get(experiment_id) or spec.experiment
        take_to_end(
            store,
            experiment_id,
            config,
            no_process=no_process,
            no_wait=False,
            lease_s=30.0,
            cpus_per_host=cpus_per_host,
            out=out,
            backend=options,
            wait_s=wait_s,
        )

    def progress(line: str) -> None:
        out.print(f"[bold]tune[/]: {esc(line)}")

    try:
        run_id = run_tuning(
            store,
            spec,
            Lab(enqueue=queue, finish=finish, on_event=progress, backend=backend),
            run_id=resume_id,
            folder=store.home / "tuning",
        )
        result = _result(store, run_id)
    finally:
        store.close()
    _emit([result], out, json_path, markdown_path, html_path)
    if result.run.state == "refused":
        sys.exit(EXIT_ERROR)
    if output_dir is not None:
        _write_output(result, spec, output_dir, out)


def _write_output(result: TuningResult, spec: TuningSpec, folder: Path, out: Console) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "best.toml").write_text(deploy_toml(result))
    out.print(f"wrote {folder / 'best.toml'}")
    best = result.best
    rendered = render_file(spec, best.config if best is not None else spec.default, folder)
    if rendered is not None:
        out.print(f"wrote {rendered}")


def _emit(
    results: list[TuningResult],
    out: Console,
    json_path: Path | None,
    markdown_path: Path | None,
    html_path: Path | None,
) -> None:
    for result in results:
        print_tuning(result, out)
    markdown = "\n".join(render_tuning_markdown(r) for r in results)
    payload = results[0].as_json() if len(results) == 1 else [r.as_json() for r in results]
    write_documents(
        out, markdown, payload, markdown_path=markdown_path, json_path=json_path, what="result"
    )
    if html_path is not None:
        write_output(out, html_path, render_tuning_html(results))


@main.group(name="tuning")
def tuning_group() -> None:
    """Tuning runs: list them, show one or several (docs/tuning.md)."""


@tuning_group.command(name="list")
@click.option("--service", help="Only this service's runs.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@store_options
def tuning_list(service: str | None, as_json: bool, db_url: str | None, home: Path) -> None:
    """The newest tuning runs first."""
    store = open_store(db_url, home=home, read_only=True)
    try:
        results = [_result(store, r.id) for r in runs.list_runs(store, service=service)]
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(to_jsonable([r.as_json() for r in results]), indent=2))
        return
    out = console(None, None)
    if not results:
        out.print("no tuning runs yet: `hairline tune FILE` starts one")
    for r in results:
        done = len(r.done)
        out.print(
            f"run {r.run.id}  {esc(r.run.name)}  {esc(r.run.service)}  {r.run.searcher}  "
            f"{r.run.state}  {done}/{r.budget} evaluated"
        )


@tuning_group.command(name="show")
@click.argument("run_ids", nargs=-1, type=int, required=True)
@document_options
@store_options
def tuning_show(
    run_ids: tuple[int, ...],
    json_path: Path | None,
    markdown_path: Path | None,
    html_path: Path | None,
    db_url: str | None,
    home: Path,
) -> None:
    """One or more tuning runs: every evaluation and the best configuration."""
    out = console(json_path, markdown_path)
    store = open_store(db_url, home=home, read_only=True)
    try:
        results = [_result(store, run_id) for run_id in run_ids]
    finally:
        store.close()
    _emit(results, out, json_path, markdown_path, html_path)
    if any(r.run.state == "failed" for r in results):
        sys.exit(EXIT_ERROR)
