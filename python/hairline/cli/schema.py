"""``hairline schema``: the JSON Schemas of every file users write and every JSON document
hairline writes, generated from their typed models (``kit/jsonschema.py``); the published
copies are docs/schema/*.json (docs/reports.md, "JSON Schemas").

A TOML file's model is the pydantic model its reader validates; a JSON document's is the
TypedDict or dataclass its writer is typed with (mypy holds the writer to it); the HTTP
API's are its pydantic request and response models.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from hairline.attribute.config import AttributionFile
from hairline.attribute.report import AttributionJson
from hairline.cli._base import EXIT_ERROR, console, main
from hairline.cli._outputs import OutputFolder
from hairline.cli._waiting import ProgressEventJson
from hairline.cli.history import HistoryJson
from hairline.config.experiment import ExperimentConfig, ServiceConfig, ServiceFile
from hairline.errors import ConfigError
from hairline.hosts.agent import AgentStartedJson, AgentStoppedJson
from hairline.hosts.factors import FactorAnalysis
from hairline.hosts.listing import HostsJson
from hairline.kit.atomic import write_text_atomic
from hairline.kit.jsonschema import Shape, generated, schema_text
from hairline.kraken.file import KrakenFile
from hairline.kraken.health import HealthFile
from hairline.kraken.report import KrakenJson
from hairline.lab.bisect import BisectionJson
from hairline.lab.events import RecordedEvent
from hairline.lab.periodic import Schedule
from hairline.lab.plan import PlanReport
from hairline.lab.sensitivity import SensitivityJson
from hairline.lab.status import ExperimentRowJson
from hairline.report.context.jsontypes import AnalysisJson, ExperimentJson
from hairline.routing.partition import PartitioningJson
from hairline.suggest.plan import SuggestionJson, SuggestionsJson
from hairline.trace.summaries import (
    TraceFilterJson,
    TraceImportJson,
    TraceSampleJson,
    TraceStatsJson,
)
from hairline.tune.results import TuningJson
from hairline.tune.tables import TuningFile
from hairline.web.apimodels import (
    Cancelled,
    CommandIn,
    CommandOut,
    ErrorOut,
    EventIn,
    EventOut,
    ExperimentList,
    ExperimentOut,
    FlaggerHook,
    FlaggerRefusal,
    GateOut,
    GatePolicyIn,
    JudgeQuery,
    MetricOut,
    Registration,
    ServiceOut,
    SubmitBody,
    Submitted,
)
from hairline.web.auth import TokenJson

__all__ = ["KINDS", "Kind", "kind_named", "schema"]


@dataclass(frozen=True)
class Kind:
    """One schema: ``docs/schema/<name>.json``."""

    name: str
    title: str
    description: str
    model: Any
    shape: Shape

    def text(self) -> str:
        """The published file's text."""
        body = generated(self.model, self.shape)
        return schema_text(self.name, self.title, self.description, body)


_TOML = " TOML, validated as the JSON tomllib reads it into."
_JSON = " NaN and infinities are written as null."


def _toml(name: str, title: str, what: str, model: Any) -> Kind:
    return Kind(name, f"hairline {title}", what + _TOML, model, "toml")


def _json(name: str, title: str, what: str, model: Any) -> Kind:
    return Kind(name, f"hairline {title}", what + _JSON, model, "json")


KINDS: tuple[Kind, ...] = (
    # The files users write.
    _toml("experiment", "experiment file", "An experiment file: the service, the trace, the "
          "arms and how to run them (`hairline run`, `aa`, `bisect`; docs/lab.md, \"Files\").",
          ExperimentConfig),
    _toml("service", "service file", "A service file: how to build, start, health-check and "
          "measure one program (docs/lab.md, \"Files\").", ServiceFile | ServiceConfig),
    _toml("kraken", "Kraken test file", "A Kraken load test: the servers under test, the "
          "load balancer and the users' traffic (`hairline kraken`; docs/kraken.md, \"The "
          "test file\").", KrakenFile),
    _toml("kraken-health", "Kraken health file", "A Kraken test's health metrics, named by "
          "its `health` (docs/kraken.md, \"Health metrics\").", HealthFile),
    _toml("tune", "tuning file", "A tuning run: the experiment, the parameters searched, how "
          "they reach the service, the objective and the searcher (`hairline tune`; "
          "docs/tuning.md).", TuningFile),
    _toml("attribute", "attribution file", "An attribution run: the factors varied, the "
          "factorial design and the quantile regression (`hairline attribute`; "
          "docs/attribution.md).", AttributionFile),
    # The JSON hairline writes.
    _json("experiment-report", "experiment report", "One experiment's report: `hairline "
          "run`, `aa`, `demo` and `report` with --json, `hairline status ID --json` "
          "(docs/reports.md, \"JSON\").", ExperimentJson),
    _json("analysis", "analysis", "An analysis of observations: `hairline analyze --json`; "
          "also an experiment report's `analysis`.", AnalysisJson),
    _json("experiment-list", "experiment list", "The newest experiments: `hairline status "
          "--json`.", list[ExperimentRowJson]),
    _json("progress-event", "progress event", "One line of `--progress json` on stderr "
          "(`run`, `aa`, `demo`, `bisect`, `lab process`), by its `event`.", ProgressEventJson),
    _json("bisection", "bisection", "A bisection's result: `hairline bisect --json` "
          "(docs/bisect.md, \"Output\").", BisectionJson),
    _json("tuning", "tuning runs", "Tuning runs: `hairline tune --json` and `hairline tuning "
          "show RUN --json` (one run: an object; several: an array), `hairline tuning list "
          "--json` (an array; docs/tuning.md).", TuningJson | list[TuningJson]),
    _json("attribution", "attribution", "An attribution run's result: `hairline attribute "
          "--json`, and report.json in the run's folder (docs/attribution.md, \"The report\").",
          AttributionJson),
    _json("kraken-report", "Kraken report", "A Kraken run's result: `hairline kraken --json` "
          "(docs/kraken.md, \"Results\").", KrakenJson),
    _json("sensitivity", "sensitivity", "How small a change an experiment file can see: "
          "`hairline sensitivity --json` (docs/precision.md).", SensitivityJson),
    _json("plan", "plan", "Trials, hosts and requests per design: `hairline plan --json` "
          "(docs/stats.md).", PlanReport),
    _json("events", "events", "Recorded deployments and maintenance, newest first: "
          "`hairline lab event list --json` (docs/safety.md).", list[RecordedEvent]),
    _json("schedules", "A/A schedules", "Periodic A/A runs: `hairline lab schedule list "
          "--json` (docs/lab.md, \"Periodic A/A runs\").", list[Schedule]),
    _json("hosts", "host inventory", "The hosts, their classes, health and allocation, and "
          "the teams' quotas: `hairline lab hosts --json` (docs/hosts.md).", HostsJson),
    _json("host-factors", "host factors", "Which host facts explain a metric's variance: "
          "`hairline lab factors --json` (docs/hosts.md).", FactorAnalysis),
    _json("agent-started", "agent started", "`hairline agent start --json` "
          "(docs/scale-out.md).", AgentStartedJson),
    _json("agent-stopped", "agent stopped", "`hairline agent stop --json`, and a foreground "
          "agent's last line (docs/scale-out.md).", AgentStoppedJson),
    _json("tokens", "API tokens", "`hairline token list --json` (docs/dashboard.md).",
          list[TokenJson]),
    _json("history", "change points", "A service's change points per metric, with the "
          "experiments either side of each: `hairline history --json` (docs/dashboard.md).",
          HistoryJson),
    _json("partitions", "partitions file", "Endpoints partitioned by the code they run: "
          "`hairline route partition --output FILE` or `--json`; `hairline route fleet` "
          "reads it (docs/routing.md).", PartitioningJson),
    _json("suggestion", "suggestion", "One diff's functions, impact and decision: `hairline "
          "suggest --json` (docs/suggest.md).", SuggestionJson),
    _json("suggestions", "suggestions", "Diffs ranked against a budget: `hairline suggest "
          "--diffs FILE --json` (docs/suggest.md).", SuggestionsJson),
    _json("trace-import", "trace import", "`hairline trace import --json` "
          "(docs/traffic.md).", TraceImportJson),
    _json("trace-stats", "trace stats", "`hairline trace stats --json` (docs/traffic.md).",
          TraceStatsJson),
    _json("trace-filter", "trace filter", "`hairline trace filter --json` "
          "(docs/traffic.md).", TraceFilterJson),
    _json("trace-sample", "trace sample", "`hairline trace sample --json` "
          "(docs/traffic.md).", TraceSampleJson),
    Kind(
        "api",
        "hairline HTTP API",
        "The bodies /api/v1 reads and the answers it gives, each under $defs by the name the "
        "OpenAPI document (/api/v1/openapi.json) gives it; a route's answer is the model that "
        "document names (docs/dashboard.md, \"HTTP API\"). JudgeQuery is the gate's query "
        "parameters (and a Flagger webhook's metadata).",
        (
            *((m, "validation") for m in (
                SubmitBody, CommandIn, EventIn, GatePolicyIn, FlaggerHook, JudgeQuery,
            )),
            *((m, "serialization") for m in (
                Submitted, ExperimentList, ExperimentOut, Cancelled, GateOut, ServiceOut,
                MetricOut, CommandOut, Registration, EventOut, ErrorOut, FlaggerRefusal,
            )),
        ),
        "api",
    ),
)  # fmt: skip


def kind_named(name: str) -> Kind | None:
    return next((k for k in KINDS if k.name == name), None)


@main.command()
@click.argument("kinds", nargs=-1, metavar="[KIND]...")
@click.option("--out", "out_dir",
              type=OutputFolder("it writes one file per kind; `hairline schema KIND` prints one"),
              help="Write each schema to DIR/KIND.json (every kind unless named).")  # fmt: skip
@click.option("--check", "check_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Compare DIR/KIND.json with the models; exit 2 if one differs.")  # fmt: skip
def schema(kinds: tuple[str, ...], out_dir: Path | None, check_dir: Path | None) -> None:
    """JSON Schemas of hairline's files and JSON outputs, from their typed models.

    Without KIND or --out: list the kinds. With one KIND: print its schema. The published
    ones are docs/schema/*.json: `hairline schema --out docs/schema` writes them, `--check
    docs/schema` tells whether they are current.
    """
    chosen = _chosen(kinds)
    out = console()
    if check_dir is not None:
        stale = [k.name for k in chosen if _read(check_dir / f"{k.name}.json") != k.text()]
        if stale:
            out.print(f"stale or missing in {check_dir}: {', '.join(stale)}")
            out.print(f"hint: hairline schema --out {check_dir}")
            raise SystemExit(EXIT_ERROR)
        out.print(f"{len(chosen)} schemas in {check_dir} match the models")
        return
    if out_dir is not None:
        for kind in chosen:
            write_text_atomic(out_dir / f"{kind.name}.json", kind.text())
        out.print(f"wrote {len(chosen)} schemas to {out_dir}")
        return
    if len(kinds) == 1:
        click.echo(chosen[0].text(), nl=False)
        return
    if kinds:
        raise ConfigError("name one KIND to print, or pass --out DIR", hint="hairline schema")
    width = max(len(k.name) for k in KINDS)
    for kind in KINDS:
        click.echo(f"{kind.name:<{width}}  {kind.title}")


def _chosen(names: tuple[str, ...]) -> list[Kind]:
    if not names:
        return list(KINDS)
    unknown = [n for n in names if kind_named(n) is None]
    if unknown:
        raise ConfigError(
            f"no schema kind {', '.join(map(repr, unknown))}",
            hint="`hairline schema` lists them: " + ", ".join(k.name for k in KINDS),
        )
    return [k for k in KINDS if k.name in names]


def _read(path: Path) -> str | None:
    return path.read_text() if path.is_file() else None
