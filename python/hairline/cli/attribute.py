"""``hairline attribute FILE``: a factorial experiment through the lab and the quantile
regression of its per-request latency on the factors (docs/attribution.md).

Each group of runs is an ordinary experiment, queued with ``origin="attribute"`` and
processed here as ``hairline run`` processes it (or by the lab's processors with
``--no-process``). The plan and each experiment's id are written to the output folder as
the run goes, so ``--resume`` finishes a stopped run and ``--analyze-only`` reanalyses a
finished one. Exit status: 0 done, 2 an error (resumable), 3 gave up waiting for hosts.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from hairline.attribute.config import AttributionSpec, load_attribution_file
from hairline.attribute.model import attribute
from hairline.attribute.report import (
    AttributionReport,
    attribution_json,
    print_attribution,
    render_attribution_html,
    render_attribution_markdown,
)
from hairline.attribute.run import Lab, Plan, gather, load_plan, run_attribution
from hairline.cli._base import console, main
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
from hairline.lab.queue import enqueue
from hairline.store.db import Store, open_store

__all__: list[str] = []


def _analyse(store: Store, spec: AttributionSpec, plan: Plan) -> AttributionReport:
    measured = gather(store, spec, plan)
    analysis = spec.analysis
    result = attribute(
        measured.latency_us,
        measured.run_of,
        measured.run_levels,
        spec.levels,
        quantiles=tuple(analysis.quantiles),
        interactions=analysis.interactions,
        bootstrap=analysis.bootstrap,
        confidence=analysis.confidence,
        seed=spec.design.seed,
    )
    return AttributionReport(
        name=spec.name,
        service=spec.experiment.service.name,
        attribution=result,
        best_for=analysis.best_for,
        experiments=tuple(e for e in plan.experiments if e is not None),
        warnings=measured.warnings,
    )


@main.command(name="attribute")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--check", is_flag=True, help="Check the attribution file and print the plan.")
@click.option(
    "--output",
    "output_dir",
    type=OutputFolder("it is the run's folder: its plan, each experiment's id, the report"),
    help="The run's folder: plan.json (groups, order, experiments) and report.json "
    "[default: HOME/attribution/NAME].",
)
@click.option("--resume", is_flag=True, help="Finish the stopped run in --output.")
@click.option(
    "--analyze-only",
    is_flag=True,
    help="Run nothing: analyse the finished run in --output again (e.g. with other "
    "[analysis] settings).",
)
@document_options
@click.option("--no-process", is_flag=True,
              help="Queue each experiment for the lab's processors and wait for it.")  # fmt: skip
@click.option("--cpus-per-host", type=click.IntRange(1),
              help="CPUs per local host (default: as `hairline run`).")  # fmt: skip
@wait_option(RUN_WAIT_S, "the experiment stays queued")
@backend_options
@store_options
def attribute_command(
    file: Path,
    check: bool,
    output_dir: Path | None,
    resume: bool,
    analyze_only: bool,
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
    """Run FILE's factorial design through the lab and attribute each latency quantile to
    the factors and their interactions (docs/attribution.md). Exit status: 0 done, 2 an
    error (finish with --resume), 3 gave up waiting for hosts."""
    out = console(json_path, markdown_path)
    spec = load_attribution_file(file)
    if check:
        from hairline.attribute.run import plan_runs

        plan = plan_runs(spec)
        runs = sum(len(g) for g in plan.groups)
        out.print(
            f"{esc(str(file))}: ok ({len(spec.factors)} factors, {len(spec.treatments)} "
            f"treatments, {runs} runs in {len(plan.groups)} experiments)",
            soft_wrap=True,
        )
        return
    options = chosen_backend(backend, ray_address)
    store = open_store(db_url, home=home)
    folder = output_dir or store.home / "attribution" / spec.name
    queued: dict[int, ExperimentConfig] = {}

    def queue(config: ExperimentConfig) -> int:
        experiment_id = enqueue(store, config, kind="ab", origin="attribute")
        queued[experiment_id] = config
        return experiment_id

    def finish(experiment_id: int) -> None:
        take_to_end(store, experiment_id, queued[experiment_id], no_process=no_process,
                    no_wait=False, lease_s=30.0, cpus_per_host=cpus_per_host, out=out,
                    backend=options, wait_s=wait_s)  # fmt: skip

    def progress(line: str) -> None:
        out.print(f"[bold]attribute[/]: {esc(line)}")

    try:
        if analyze_only:
            plan = load_plan(spec, folder)
        else:
            plan = run_attribution(
                store, spec, Lab(enqueue=queue, finish=finish, on_event=progress), folder,
                resume=resume,
            )  # fmt: skip
        progress(f"analysing {sum(len(g) for g in plan.groups)} runs")
        report = _analyse(store, spec, plan)
    finally:
        store.close()
    payload = attribution_json(report)
    (folder / "report.json").write_text(json.dumps(payload, indent=1) + "\n")
    print_attribution(report, out)
    markdown = render_attribution_markdown(report)
    write_documents(out, markdown, payload, markdown_path=markdown_path, json_path=json_path,
                    what="attribution")  # fmt: skip
    if html_path is not None:
        write_output(out, html_path, render_attribution_html(report))
