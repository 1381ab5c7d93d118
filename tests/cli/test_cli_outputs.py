"""`-` is standard output for every output flag of every command, found by walking the
command tree: a new command's output flag fails here until it has a row in :data:`CASES`.

Each row runs the command for real, cheaply: on a lab whose finished experiments, tuning run
and attribution run were stored as the processor stores them (observations per trial,
analysed), on an experiment whose build fails at once (`run`, `aa`, `bisect`: a failed
experiment's or a stopped bisection's documents are written by the same code as any other),
on a demo whose service exits at once, or on the bundled example files. The command's stdout
must then be the document alone, parsed whole as what it is, and no file named ``-`` may
appear. A flag that cannot be ``-`` (a folder, a file another process writes) is refused with
the reason, before anything runs. `kraken` needs a fleet behind HAProxy and `lab factors` a
lab of host facts: their rows name the test that builds those and passes the flag ``-``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import click
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from hairline.attribute.config import load_attribution_file
from hairline.attribute.run import Lab as AttributionLab
from hairline.attribute.run import run_attribution
from hairline.cli import main
from hairline.cli._outputs import OutputFile, OutputFolder
from hairline.config import ExperimentConfig
from hairline.lab.files import load_experiment_file
from hairline.lab.queue import enqueue
from hairline.lab.results import analyze_experiment, save_analysis, store_verdict_rows
from hairline.lab.schedule import schedule
from hairline.store.db import Store, open_store
from hairline.store.models import Experiment, Trial
from hairline.store.observations import write_observations
from hairline.tune import runs
from hairline.tune.config import load_tuning_file
from schema_check import check_schema

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "sample-service"
TRACE_DATA = ROOT / "tests" / "trace" / "data"
GIT_ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
}  # fmt: skip


@dataclass(frozen=True)
class ToStdout:
    """The command line (``{name}`` filled from :class:`Lab`) that writes the flag's
    document, and what stdout must then parse as."""

    args: tuple[str, ...]
    reads: str  # json | markdown | html | junit | jsonl
    exits: tuple[int, ...] = (0,)
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Refused:
    """``-`` is refused, with this reason in the error."""

    why: str


@dataclass(frozen=True)
class OtherTest:
    """This test (which builds what the command needs: a fleet behind HAProxy, a lab of
    host facts) passes the flag ``-`` and reads stdout."""

    test: str


# Options typed as paths that a command reads or keeps its state in, not outputs.
NOT_OUTPUTS: dict[str, str] = {
    "--home": "the lab's state folder (database, builds, artifacts)",
    "--history": "analyze: A/A observations to read",
    "--aa": "plan: A/A observations to read",
    "--check": "schema: the folder of schemas to compare with",
    "--partitions": "route fleet: the partitions file to read",
    "--suggest-profile": "run: a profile to read",
    "--suggest-repo": "run: the repository to read",
    "--repo": "suggest: the repository to read",
    "--profile": "suggest: a profile to read",
    "--diffs": "suggest: the pairs to read",
    "--experiment": "suggest: the experiment file to read",
    "--ray-temp-dir": "agent start: Ray's session folder (state, not a document)",
    "ci comment --markdown": "the Markdown to post: read, '-' is stdin",
}

KRAKEN_SIGTERM = (
    "tests/kraken/test_kraken_cli.py::test_sigterm_aborts_restores_and_exits_143_with_the_json"
)
FAILING = ("{failing}",)  # an experiment whose build fails at once
STORE = ("--db", "{db}", "--home", "{home}")
REPORT = ("{done}", *STORE)

CASES: dict[str, ToStdout | Refused | OtherTest] = {
    "aa --json": ToStdout(("aa", *FAILING, "--home", "{tmp}", "--json", "-"), "json", (2,)),
    "aa --markdown": ToStdout(
        ("aa", *FAILING, "--home", "{tmp}", "--markdown", "-"), "markdown", (2,)
    ),
    "aa --html": ToStdout(("aa", *FAILING, "--home", "{tmp}", "--html", "-"), "html", (2,)),
    "aa --junit": ToStdout(("aa", *FAILING, "--home", "{tmp}", "--junit", "-"), "junit", (2,)),
    "run --json": ToStdout(("run", *FAILING, "--home", "{tmp}", "--json", "-"), "json", (2,)),
    "run --markdown": ToStdout(
        ("run", *FAILING, "--home", "{tmp}", "--markdown", "-"), "markdown", (2,)
    ),
    "run --html": ToStdout(("run", *FAILING, "--home", "{tmp}", "--html", "-"), "html", (2,)),
    "run --junit": ToStdout(("run", *FAILING, "--home", "{tmp}", "--junit", "-"), "junit", (2,)),
    # The demo's sample service, started as `false`, exits before it is healthy: the demo
    # fails in a second and writes the failed experiment's report.
    **{
        f"demo --{flag}": ToStdout(
            ("demo", "--home", "{tmp}", "--trials", "1", f"--{flag}", "-"),
            reads,
            (2,),
            env={"HAIRLINE_ENGINE": "/bin/false"},
        )
        for flag, reads in (
            ("json", "json"),
            ("markdown", "markdown"),
            ("html", "html"),
            ("junit", "junit"),
        )
    },
    **{
        f"report --{flag}": ToStdout(("report", *REPORT, f"--{flag}", "-"), reads, (1,))
        for flag, reads in (
            ("json", "json"),
            ("markdown", "markdown"),
            ("html", "html"),
            ("junit", "junit"),
        )
    },
    "gate --markdown": ToStdout(("gate", *REPORT, "--markdown", "-"), "markdown", (1,)),
    "gate --junit": ToStdout(("gate", *REPORT, "--junit", "-"), "junit", (1,)),
    "analyze --json": ToStdout(("analyze", "{observations}", "--json", "-"), "json", (1,)),
    # --effect 100%: a plan of a few trials, found in seconds (20% takes 25 s).
    "plan --json": ToStdout(
        ("plan", "--endpoint", "1", "--threshold", "20%", "--effect", "100%", "--json", "-"),
        "json",
    ),
    "history --json": ToStdout(
        ("history", "sample-service", "--db", "{db}", "--home", "{home}", "--json", "-"), "json"
    ),
    "sensitivity --json": ToStdout(
        (
            "sensitivity",
            "{experiment}",
            "--from-experiment",
            "{aa}",
            "--db",
            "{db}",
            "--home",
            "{home}",
            "--json",
            "-",
        ),
        "json",
    ),
    "lab factors --json": OtherTest(
        "tests/hosts/test_factors.py::test_lab_factors_prints_tables_and_json"
    ),
    "trace stats --json": ToStdout(("trace", "stats", "{trace}", "--json", "-"), "json"),
    **{
        f"trace {verb} {flag}": ToStdout(
            (
                "trace",
                verb,
                *args,
                *(("-o", "-") if flag == "-o/--output" else ("-o", "{tmp}/t.jsonl", "--json", "-")),
            ),
            "jsonl" if flag == "-o/--output" else "json",
        )
        for verb, args in (
            ("import", ("--from", "nginx", str(TRACE_DATA / "nginx_access.log"), "--skip-bad")),
            ("filter", ("{trace}", "--count", "20")),
            ("sample", ("{trace}", "--fraction", "0.5")),
        )
        for flag in ("-o/--output", "--json")
    },
    "route partition --output": ToStdout(
        ("route", "partition", str(ROOT / "examples/routing/profile.folded"), "--output", "-"),
        "json",
    ),
    "record --out": Refused("the recorder's stdout says where it listens"),
    "kraken --watchdog-log": Refused("the weight watchdog is a process of its own"),
    "kraken --json": OtherTest(KRAKEN_SIGTERM),
    "kraken --html": OtherTest(KRAKEN_SIGTERM),
    "schema --out": Refused("it writes one file per kind"),
    "ci action --report-dir": Refused("it writes four reports"),
    "attribute --output": Refused("it is the run's folder"),
    "tune --output": Refused("it writes best.toml"),
    # The finished run in its folder analysed again, as `--analyze-only` does after a run.
    **{
        f"attribute --{flag}": ToStdout(
            (
                "attribute",
                "{attribute}",
                "--output",
                "{attribution}",
                "--analyze-only",
                *STORE,
                f"--{flag}",
                "-",
            ),
            reads,
        )
        for flag, reads in (("json", "json"), ("markdown", "markdown"), ("html", "html"))
    },
    # The first step's build fails: the bisection stops, and says so in its documents.
    **{
        f"bisect --{flag}": ToStdout(
            (
                "bisect",
                "{bisect}",
                "--good",
                "main~1",
                "--bad",
                "main",
                "--home",
                "{tmp}",
                f"--{flag}",
                "-",
            ),
            reads,
            (2,),
        )
        for flag, reads in (("json", "json"), ("markdown", "markdown"), ("junit", "junit"))
    },
    # A finished tuning run resumed: nothing is left to evaluate, the result is written.
    **{
        f"tune --{flag}": ToStdout(
            (
                "tune",
                "{tune}",
                "--resume",
                "{tuning}",
                "--evaluations",
                "1",
                *STORE,
                f"--{flag}",
                "-",
            ),
            reads,
        )
        for flag, reads in (("json", "json"), ("markdown", "markdown"), ("html", "html"))
    },
    **{
        f"tuning show --{flag}": ToStdout(
            ("tuning", "show", "{tuning}", *STORE, f"--{flag}", "-"), reads
        )
        for flag, reads in (("json", "json"), ("markdown", "markdown"), ("html", "html"))
    },
}


# Each command's JSON document and its published schema (docs/schema/KIND.json).
SCHEMAS = {
    "run": "experiment-report", "aa": "experiment-report", "demo": "experiment-report",
    "report": "experiment-report", "analyze": "analysis", "plan": "plan",
    "bisect": "bisection", "sensitivity": "sensitivity", "trace stats": "trace-stats",
    "trace import": "trace-import", "trace filter": "trace-filter",
    "trace sample": "trace-sample", "route partition": "partitions", "tune": "tuning",
    "tuning show": "tuning", "attribute": "attribution", "history": "history",
}  # fmt: skip


def _commands(
    group: click.Group, ctx: click.Context, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, click.Command]]:
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        if isinstance(command, click.Group):
            yield from _commands(command, ctx, (*path, name))
        else:
            yield " ".join((*path, name)), command


def path_options() -> list[tuple[str, click.Option]]:
    """Every option of every command whose value is a path: ``("run --json", option)``."""
    ctx = click.Context(main)
    return [
        (f"{name} {'/'.join(p.opts)}", p)
        for name, command in _commands(main, ctx)
        for p in command.params
        if isinstance(p, click.Option) and isinstance(p.type, click.Path | click.File)
    ]


def output_flags() -> list[str]:
    return [key for key, p in path_options() if isinstance(p.type, OutputFile | OutputFolder)]


def test_every_path_option_is_declared_an_output_or_is_an_input() -> None:
    """A flag typed as a plain path would write `-` as a file: an output must be declared
    with cli/_outputs.py's types, an input named in NOT_OUTPUTS."""
    undeclared = [
        key for key, p in path_options()
        if not isinstance(p.type, OutputFile | OutputFolder)
        and key.rsplit(" ", 1)[-1] not in NOT_OUTPUTS and key not in NOT_OUTPUTS
    ]  # fmt: skip
    assert undeclared == []


def test_every_output_flag_has_a_row_and_every_row_a_flag() -> None:
    flags = set(output_flags())
    assert sorted(flags - set(CASES)) == [], "add a row to CASES for each"
    assert sorted(set(CASES) - flags) == [], "rows of flags that are gone"
    assert len(flags) >= 50  # the walk found them: not an empty tree


@dataclass
class Lab:
    """A SQLite lab holding a finished A/B of the sample service (B 3% costlier in CPU) and a
    finished A/A, and the files the rows name."""

    values: dict[str, str]

    def args(self, row: ToStdout, tmp: Path) -> list[str]:
        return [a.format(**self.values, tmp=tmp) for a in row.args]


Measure = Callable[[str, np.random.Generator], list[tuple[str, float]]]


def finish_as_the_processor(
    store: Store, experiment_id: int, config: ExperimentConfig, folder: Path, measure: Measure
) -> None:
    """A queued experiment finished as the processor finishes it: one Parquet file of
    observations per trial (``measure`` gives an arm's values in a batch), analysed, its
    verdicts stored."""
    rng = np.random.default_rng(experiment_id)
    batches = schedule(tuple(config.arms), trials=config.design.planned_trials,
                       design=config.design.schedule)  # fmt: skip
    with store.transaction() as session:
        for index in range(config.design.planned_trials):
            rows: dict[str, list[object]] = {
                k: [] for k in ("trial", "batch", "arm", "host", "metric", "value")
            }
            for b in (b for b in batches if b.trial == index):
                for host, arm in enumerate(b.arm_on_host):
                    for metric, value in measure(arm, rng):
                        for name, x in zip(rows, (index, b.batch, arm, host, metric, value),
                                           strict=True):  # fmt: skip
                            rows[name].append(x)
            path = write_observations(folder / f"e{experiment_id}-t{index}.parquet",
                                      pa.table(rows))  # fmt: skip
            trial = session.query(Trial).filter_by(experiment_id=experiment_id, index=index).one()
            trial.state, trial.observations = "done", str(path)
            trial.started_at, trial.finished_at = 10.0 * index, 10.0 * index + 9.0
    analysis = analyze_experiment(store, experiment_id, config, history_ids=[])
    with store.transaction() as session:
        row = session.get(Experiment, experiment_id)
        assert row is not None
        row.phase, row.started_at, row.finished_at = "done", 1.0, 60.0
        artifacts = Path(row.artifacts_dir)
    save_analysis(artifacts, analysis, history_ids=[])
    with store.transaction() as session:
        store_verdict_rows(session, experiment_id, analysis)


def cpu_costing(effect: float) -> Measure:
    """CPU per request of about 150 µs, arm B ``effect`` costlier; no errors."""

    def measure(arm: str, rng: np.random.Generator) -> list[tuple[str, float]]:
        cpu = 150_000 * (1 + effect * (arm == "B")) * (1 + rng.normal(0, 0.003))
        return [("cpu_ns_per_request", cpu), ("error_rate", 0.0)]

    return measure


def latencies(arm: str, rng: np.random.Generator) -> list[tuple[str, float]]:
    """Forty requests' latencies, an attribution run's measurements."""
    return [("latency_us", float(x)) for x in rng.lognormal(6.0, 0.4, 40)]


def store_finished(store: Store, file: Path, *, kind: str, measure: Measure) -> int:
    config = load_experiment_file(file)
    experiment_id = enqueue(store, config, kind=kind)
    finish_as_the_processor(store, experiment_id, config, file.parent, measure)
    return experiment_id


def store_tuning_run(store: Store, file: Path, experiment_id: int) -> int:
    """A finished tuning run of ``file`` with its budget cut to the one evaluation it made,
    as `--evaluations 1` cuts it: ``tune --resume`` has nothing left to run."""
    spec = dataclasses.replace(load_tuning_file(file), evaluations=1)
    run_id = runs.create_run(store, spec)
    [position] = runs.add_proposed(store, run_id, 1, [{"log_batch": 64, "log_codec": "fast"}])
    runs.set_experiment(store, run_id, [position], experiment_id, ["B"])
    runs.record(store, run_id, position, "done", value=145_000.0, se=400.0, effect_rel=-0.03,
                ci_low=-0.04, ci_high=-0.02, mean_control=150_000.0,
                mean_candidate=145_000.0)  # fmt: skip
    runs.set_state(store, run_id, "done")
    return run_id


def store_attribution(store: Store, file: Path, folder: Path) -> None:
    """An attribution run whose experiments the processor finished, in ``folder``."""
    spec = load_attribution_file(file)
    queued: dict[int, ExperimentConfig] = {}

    def queue(config: ExperimentConfig) -> int:
        queued[experiment_id := enqueue(store, config, origin="attribute")] = config
        return experiment_id

    def finish(experiment_id: int) -> None:
        finish_as_the_processor(store, experiment_id, queued[experiment_id], folder, latencies)

    run_attribution(store, spec, AttributionLab(enqueue=queue, finish=finish), folder)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    folder = tmp_path_factory.mktemp("outputs")
    for name in (
        "service.toml",
        "experiment.toml",
        "trace.jsonl",
        "tune.toml",
        "tune-experiment.toml",
        "attribute.toml",
        "attribute-experiment.toml",
    ):
        shutil.copy(EXAMPLE / name, folder / name)
    home = folder / "home"
    db = f"sqlite:///{home / 'hairline.db'}"
    store = open_store(db, home=home)
    try:
        aa = store_finished(store, folder / "experiment.toml", kind="aa", measure=cpu_costing(0))
        done = store_finished(store, folder / "experiment.toml", kind="ab",
                              measure=cpu_costing(0.03))  # fmt: skip
        tuning = store_tuning_run(store, folder / "tune.toml", done)
        store_attribution(store, folder / "attribute.toml", folder / "attribution")
    finally:
        store.close()
    # A service whose build fails at once: `run` and `aa` end in a second, reports written.
    failing = folder / "failing"
    (failing / "src").mkdir(parents=True)
    (failing / "src" / "main.c").write_text("int main(void) { return 0; }\n")
    shutil.copy(EXAMPLE / "trace.jsonl", failing / "trace.jsonl")
    (failing / "service.toml").write_text(
        '[service]\nname = "broken"\nstart = "{artifact} --port {port}"\nhealth = "/healthz"\n'
        '[service.build]\ncommand = "echo no compiler here >&2; exit 1"\nartifact = "svc"\n'
    )
    (failing / "experiment.toml").write_text(
        'service = "service.toml"\ntrace = "trace.jsonl"\nteam = "demo"\n'
        '[arms.A]\npath = "src"\n[arms.B]\npath = "src"\n'
        "[load]\nrate_per_s = 100\nduration_s = 1\n[design]\ntrials = 2\n"
    )
    repo = failing / "repo"
    repo.mkdir()
    for number in (1, 2):
        (repo / "VERSION").write_text(f"{number}\n")
        for args in (("init", "--quiet", "--initial-branch", "main"), ("add", "VERSION"),
                     ("commit", "--quiet", "-m", f"commit {number}")):  # fmt: skip
            if number == 1 or args[0] != "init":
                subprocess.run(["git", *args], cwd=repo, env=GIT_ENV, check=True)
    (failing / "bisect.toml").write_text(
        (failing / "experiment.toml").read_text().replace('path = "src"',
                                                          'git = "main"\nrepo = "repo"')
    )  # fmt: skip
    observations = folder / "obs.parquet"
    rng = np.random.default_rng(7)
    pq.write_table(pa.Table.from_pylist([
        {"trial": t, "arm": arm, "host": h, "metric": "cpu_ns_per_request",
         "value": float(rng.normal(1000.0 * (1.05 if arm == "B" else 1.0), 5.0))}
        for t in range(4) for h, arm in enumerate("AB")
    ]), observations)  # fmt: skip
    return Lab({
        "db": db, "home": str(home), "done": str(done), "aa": str(aa), "tuning": str(tuning),
        "tune": str(folder / "tune.toml"), "attribute": str(folder / "attribute.toml"),
        "attribution": str(folder / "attribution"),
        "experiment": str(folder / "experiment.toml"), "failing": str(failing / "experiment.toml"),
        "bisect": str(failing / "bisect.toml"),
        "observations": str(observations), "trace": str(folder / "trace.jsonl"),
    })  # fmt: skip


def parsed(reads: str, stdout: str) -> object:
    """stdout read whole as what the flag writes; a line of anything else fails."""
    if reads == "json":
        return json.loads(stdout)
    if reads == "junit":
        return ET.fromstring(stdout)
    if reads == "jsonl":
        return [json.loads(line) for line in stdout.splitlines()]
    if reads == "html":
        assert stdout.lstrip().lower().startswith("<!doctype html"), stdout[:200]
        assert stdout.rstrip().endswith("</html>"), stdout[-200:]
        return stdout
    assert reads == "markdown"
    # Not the terminal's lines: "wrote FILE", "experiment 1 (A/B ...) queued", its panels.
    assert stdout.strip() and not re.search(r"^(wrote |experiment \d+ \()|[╭│]", stdout,
                                            re.M), stdout[:400]  # fmt: skip
    return stdout


@pytest.mark.parametrize("flag", sorted(k for k, row in CASES.items() if isinstance(row, ToStdout)))
def test_dash_writes_the_document_alone_to_stdout_and_no_file_named_dash(
    flag: str, lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    row = CASES[flag]
    assert isinstance(row, ToStdout)
    monkeypatch.chdir(tmp_path)
    for name, value in row.env.items():
        monkeypatch.setenv(name, value)
    done = CliRunner().invoke(main, lab.args(row, tmp_path))
    assert done.exit_code in row.exits, done.output + repr(done.exception)
    document = parsed(row.reads, done.stdout)
    assert document
    command = flag.rsplit(" ", 1)[0]
    if row.reads == "json" and command in SCHEMAS:
        check_schema(SCHEMAS[command], document)
    assert not (tmp_path / "-").exists(), os.listdir(tmp_path)


@pytest.mark.parametrize("flag", sorted(k for k, row in CASES.items() if isinstance(row, Refused)))
def test_a_flag_that_cannot_be_stdout_refuses_dash_saying_why(flag: str, tmp_path: Path) -> None:
    row = CASES[flag]
    assert isinstance(row, Refused)
    command, option = flag.rsplit(" ", 1)
    done = CliRunner().invoke(main, [*command.split(), option.split("/")[-1], "-"])
    assert done.exit_code == 2, done.output
    assert "'-' (standard output) is not possible here" in done.stderr, done.stderr
    assert row.why in done.stderr.replace("\n", " "), done.stderr


@pytest.mark.parametrize(
    "flag", sorted(k for k, row in CASES.items() if isinstance(row, OtherTest))
)
def test_the_named_test_passes_the_flag_dash(flag: str) -> None:
    row = CASES[flag]
    assert isinstance(row, OtherTest)
    file, _, name = row.test.partition("::")
    text = (ROOT / file).read_text()
    start = text.index(f"def {name}(")
    end = text.find("\ndef ", start + 1)
    decorators = text[:start].rsplit("\n\n\n", 1)[-1]
    option = flag.rsplit(" ", 1)[-1]
    assert f'"{option}", "-"' in decorators + text[start:end], f"{row.test}: no {option} -"


def test_a_bisection_stopped_by_a_failed_build_reports_why_in_each_document(
    lab: Lab, tmp_path: Path
) -> None:
    bisect = ["bisect", lab.values["bisect"], "--good", "main~1", "--bad", "main",
              "--home", str(tmp_path)]  # fmt: skip
    done = CliRunner().invoke(main, [*bisect, "--json", "-", "--junit", str(tmp_path / "j.xml")])
    assert done.exit_code == 2, done.output
    result = json.loads(done.stdout)
    assert result["status"] == "failed" and result["culprit"] is None
    assert result["reason"].startswith("step experiment 1 ended failed: build of git ")
    assert "no compiler here" in result["reason"] and "`hairline report 1`" in result["reason"]
    [error] = ET.parse(tmp_path / "j.xml").findall(".//testcase[@name='culprit']/error")
    assert error.get("type") == "failed" and "step experiment 1 ended failed" in str(
        error.get("message")
    )
    assert "stopped by a failed step between" in done.stderr


def test_two_flags_cannot_share_stdout(lab: Lab) -> None:
    done = CliRunner().invoke(main, ["report", lab.values["done"], "--db", lab.values["db"],
                                     "--home", lab.values["home"], "--json", "-",
                                     "--markdown", "-"])  # fmt: skip
    assert done.exit_code == 2
    assert "'-' (standard output) is already --json's" in done.stderr
    assert done.stdout == ""


def test_a_file_gets_the_same_document_and_a_line_saying_where(lab: Lab, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    report = ["report", lab.values["done"], "--db", lab.values["db"], "--home", lab.values["home"]]
    to_file = CliRunner().invoke(main, [*report, "--json", str(out)])
    to_stdout = CliRunner().invoke(main, [*report, "--json", "-"])
    assert f"wrote {out}" in to_file.stdout and "cpu_ns_per_request" in to_file.stdout
    assert json.loads(out.read_text()) == json.loads(to_stdout.stdout)
    assert "cpu_ns_per_request" in to_stdout.stderr
