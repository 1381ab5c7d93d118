"""Every report warns at the top about experiments and events that ran beside this one on
its hosts or downstreams (lab/concurrency.py), and the JSON lists them."""

from __future__ import annotations

import json
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path

from report_fixture import make_report
from rich.console import Console

from hairline.config import load_experiment
from hairline.lab.concurrency import Overlap
from hairline.lab.events import add_event
from hairline.lab.queue import enqueue
from hairline.report.context import experiment_json, overlap_notes, trials_text
from hairline.report.experiment import load_report
from hairline.report.html.page import render_html
from hairline.report.markdown import render_markdown
from hairline.report.terminal import print_experiment
from hairline.store.db import open_store
from hairline.store.models import Host, Run

EXAMPLE = Path(__file__).parents[2] / "examples" / "sample-service"
DB = "127.0.0.1:5432"
AT = datetime(2025, 3, 1, 12, 3, tzinfo=UTC)
OVERLAPS = (
    Overlap("experiment", "experiment 12 (search)", "same host w2", AT, AT, trials=(3, 4, 5)),
    Overlap("deploy", DB, f"same downstream {DB}", AT, None, trials=(2,), note="schema v8"),
)
WARNINGS = (
    "WARNING: experiment 12 (search) ran on w2 during trials 3-5; a difference may come from it",
    "WARNING: deploy of 127.0.0.1:5432 during trial 2 (schema v8); a difference may come from it",
)


def test_trials_are_numbered_in_runs() -> None:
    assert trials_text([2]) == "trial 2"
    assert trials_text([1, 3, 4, 5, 7]) == "trials 1, 3-5, 7"


def test_the_warnings_say_what_ran_where_and_during_which_trials() -> None:
    assert overlap_notes(OVERLAPS) == WARNINGS
    machine = Overlap("experiment", "experiment 3 (feed)", "same machine box", AT, AT, (1,))
    (text,) = overlap_notes([machine])
    assert text.startswith("WARNING: experiment 3 (feed) ran on another CPU set of machine box")


def test_every_renderer_warns_before_the_verdicts_and_the_json_lists_them() -> None:
    report = make_report(overlaps=OVERLAPS, notes=("a note about the load",))
    markdown = render_markdown(report)
    assert f"> **{WARNINGS[0]}**" in markdown
    assert markdown.index(WARNINGS[1]) < markdown.index("a note about the load")
    console = Console(record=True, width=200, color_system=None)
    print_experiment(report, console)
    shown = re.sub(r" +", " ", console.export_text())
    assert shown.index(WARNINGS[0]) < shown.index("experiment 7 (A/B) of checkout")
    html = render_html(report)
    assert '<ul class="notes overlaps"><li>WARNING: experiment 12 (search) ran on w2' in html
    data = experiment_json(report)
    assert data["overlaps"][1] == {
        "kind": "deploy", "what": "127.0.0.1:5432", "reason": "same downstream 127.0.0.1:5432",
        "started_at": "2025-03-01T12:03:00+00:00", "ended_at": None, "trials": [2],
        "note": "schema v8", "text": WARNINGS[1],
    }  # fmt: skip
    assert experiment_json(make_report())["overlaps"] == []
    assert "WARNING" not in render_markdown(make_report())


def test_a_stored_experiment_reports_what_ran_beside_it(db_url: str, tmp_path: Path) -> None:
    for name in ("service.toml", "experiment.toml", "trace.jsonl"):
        shutil.copy(EXAMPLE / name, tmp_path / name)
    store = open_store(db_url, home=tmp_path / "home")
    try:
        config = load_experiment(tmp_path / "experiment.toml")
        ours, theirs = enqueue(store, config), enqueue(store, config)
        with store.transaction() as session:
            host = Host(name="w2", backend="ray", machine="w2", cpus="0-3", facts="{}")
            session.add(host)
            session.flush()
            for experiment, trial, start_s in ((ours, 0, 100.0), (ours, 1, 200.0),
                                               (theirs, 0, 250.0)):  # fmt: skip
                session.add(Run(experiment_id=experiment, trial=trial, batch=0, arm="A",
                                host_id=host.id, host_index=0, processor="p", facts="{}",
                                started_at=start_s, stopped_at=start_s + 100.0))  # fmt: skip
        add_event(store, "maintenance", service="rack", host="w2", started_at=150.0)
        report = load_report(store, ours)
    finally:
        store.close()
    assert [(o.what, o.reason, o.trials) for o in report.overlaps] == [
        ("rack", "same host w2", (1,)),
        (f"experiment {theirs} (sample-service)", "same host w2", (2,)),
    ]
    assert json.dumps(experiment_json(report)["overlaps"])
