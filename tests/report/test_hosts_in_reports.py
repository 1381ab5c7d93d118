"""Reports list each host's facts, name and address, warn when an experiment's hosts differ,
and say when the arms are host classes (hardware mode)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from report_fixture import make_report

from hairline.config import load_experiment
from hairline.lab.queue import enqueue
from hairline.report.context import HostReport, Seat, experiment_json, handover_notes, host_notes
from hairline.report.experiment import load_report
from hairline.report.markdown import render_markdown
from hairline.store.db import open_store
from hairline.store.models import Host, Run

EXAMPLE = Path(__file__).parents[2] / "examples" / "sample-service"


def node(index: int, kernel: str, cpu_model: str = "Xeon 8375C") -> HostReport:
    facts = {"region": "eu", "server_type": "web", "arch": "x86_64", "cpu_model": cpu_model,
             "kernel": kernel, "turbo": "off"}  # fmt: skip
    return HostReport(index, (0, 1, 2, 3), facts, name=f"node{index}", address=f"10.0.0.{index}")


def test_hosts_alike_need_no_note_and_hosts_that_differ_get_a_warning() -> None:
    assert host_notes((node(0, "6.1"), node(1, "6.1"))) == ()
    (note,) = host_notes((node(0, "6.1"), node(1, "6.8")))
    assert note.startswith("WARNING: the experiment's hosts differ in kernel 6.1 (host 0), "
                           "6.8 (host 1)")  # fmt: skip


def test_hardware_mode_says_the_verdict_compares_the_hardware_and_expects_it_to_differ() -> None:
    hosts = (node(0, "6.1", "Xeon 8375C"), node(1, "6.1", "EPYC 7R13"))
    classes = {"xeon": {"cpu_model": "Xeon 8375C"}, "epyc": {"cpu_model": "EPYC 7R13"}}
    (note,) = host_notes(hosts, arm_classes=classes)
    assert note.startswith("hardware mode: one build on every arm; the arms are host classes "
                           "(xeon: cpu model Xeon 8375C; epyc: cpu model EPYC 7R13)")  # fmt: skip
    assert "the verdict compares the hardware" in note
    # A difference the arms do not name is still a mismatch.
    mixed = (node(0, "6.1", "Xeon 8375C"), node(1, "6.8", "EPYC 7R13"))
    assert "differ in kernel" in host_notes(mixed, arm_classes=classes)[1]


def test_the_json_and_markdown_name_each_host_and_where_it_was_reached() -> None:
    report = make_report(hosts=(node(0, "6.1"), node(1, "6.1")), mode="hardware")
    data = experiment_json(report)
    assert data["mode"] == "hardware"
    assert data["hosts"][1]["name"] == "node1" and data["hosts"][1]["address"] == "10.0.0.1"
    assert "- host 1: node1 at 10.0.0.1, CPUs 0,1,2,3 (region eu;" in render_markdown(report)


def test_a_stored_experiment_reports_the_facts_of_the_hosts_it_ran_on(
    db_url: str, tmp_path: Path
) -> None:
    for name in ("service.toml", "experiment.toml", "trace.jsonl"):
        shutil.copy(EXAMPLE / name, tmp_path / name)
    store = open_store(db_url, home=tmp_path / "home")
    try:
        experiment_id = enqueue(store, load_experiment(tmp_path / "experiment.toml"))
        with store.transaction() as session:
            hosts = [
                Host(name=f"node{i}", backend="ray", machine=f"node{i}", cpus="0-3",
                     facts="{}", enabled=True, address=f"10.0.0.{i}", kernel=kernel)
                for i, kernel in enumerate(("6.1", "6.8"))
            ]  # fmt: skip
            session.add_all(hosts)
            session.flush()
            for index, host in enumerate(hosts):
                facts = {"region": "eu", "kernel": host.kernel, "cpu_model": "Xeon"}
                session.add(
                    Run(experiment_id=experiment_id, trial=0, batch=0, arm="AB"[index],
                        host_id=host.id, host_index=index, processor="p", facts=json.dumps(facts),
                        started_at=1.0)
                )  # fmt: skip
        report = load_report(store, experiment_id)
    finally:
        store.close()
    assert [(h.name, h.address, h.cpus) for h in report.hosts] == [
        ("node0", "10.0.0.0", (0, 1, 2, 3)),
        ("node1", "10.0.0.1", (0, 1, 2, 3)),
    ]
    assert report.mode == "efficiency"
    assert any(
        n.startswith("WARNING: the experiment's hosts differ in kernel") for n in report.notes
    )


def test_a_processor_taking_over_and_a_replaced_host_are_said_in_run_order() -> None:
    seats = [
        Seat(0, 0, "w1", "p1"), Seat(0, 1, "w2", "p1"),
        Seat(1, 0, "w1", "p1"), Seat(1, 1, "w2", "p1", lost="agent gone"),
        Seat(1, 0, "w1", "p2"), Seat(1, 1, "w3", "p2"),
        Seat(2, 0, "w1", "p2"), Seat(2, 1, "w3", "p2"),
    ]  # fmt: skip
    processors, host = handover_notes(seats)
    assert processors.startswith("run by 2 processors in turn: p1 (trials 1-2), p2 (trials 2-3)")
    assert host.startswith("host 1 changed hands: w2 (trials 1-2), then w3 (trials 2-3); w2 was "
                           "lost (agent gone; now marked unhealthy)")  # fmt: skip
    assert handover_notes(seats[:4]) == ()
    # A host that was replaced but is healthy again says so without "lost".
    (healthy,) = handover_notes([Seat(0, 0, "w1", "p"), Seat(1, 0, "w4", "p")])
    assert "was lost" not in healthy and "w1 (trial 1), then w4 (trial 2)" in healthy


def test_a_stored_experiment_says_who_took_over_and_which_host_was_lost(
    db_url: str, tmp_path: Path
) -> None:
    for name in ("service.toml", "experiment.toml", "trace.jsonl"):
        shutil.copy(EXAMPLE / name, tmp_path / name)
    store = open_store(db_url, home=tmp_path / "home")
    try:
        experiment_id = enqueue(store, load_experiment(tmp_path / "experiment.toml"))
        with store.transaction() as session:
            hosts = [
                Host(name=f"w{i}", backend="ray", machine=f"w{i}", cpus="0-3", facts="{}",
                     enabled=True, address=f"10.0.0.{i}", healthy=i != 2,
                     health_note="lost mid-trial: node died" if i == 2 else None)
                for i in (1, 2, 3)
            ]  # fmt: skip
            session.add_all(hosts)
            session.flush()
            w1, w2, w3 = hosts
            for trial, index, host, processor in ((0, 0, w1, "p1"), (0, 1, w2, "p1"),
                                                  (0, 0, w1, "p2"), (0, 1, w3, "p2")):  # fmt: skip
                session.add(Run(experiment_id=experiment_id, trial=trial, batch=0, arm="AB"[index],
                                host_id=host.id, host_index=index, processor=processor,
                                facts="{}", started_at=1.0))  # fmt: skip
        report = load_report(store, experiment_id)
    finally:
        store.close()
    assert [h.name for h in report.hosts] == ["w1", "w2", "w3"]
    notes = [n for n in report.notes if "processors" in n or "changed hands" in n]
    assert notes == [
        "run by 2 processors in turn: p1 (trial 1), p2 (trial 1); each took over when the one "
        "before let go (it died or lost the database, and its lease lapsed; or it gave the "
        "experiment back while it waited); a trial left unfinished is run again from its start",
        "host 1 changed hands: w2 (trial 1), then w3 (trial 1); w2 was lost (lost mid-trial: "
        "node died; now marked unhealthy); a trial a lost host interrupted is run again from "
        "its start",
    ]
    assert notes[1] in render_markdown(report) and notes[1] in experiment_json(report)["notes"]
