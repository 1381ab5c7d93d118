"""The dashboard's reads: the experiments list a page at a time, and the gate."""

from __future__ import annotations

import pytest
from webseed import seed

from hairline.errors import HairlineError
from hairline.store.db import Store
from hairline.store.models import AuditEntry, Triage
from hairline.web.queries import ExperimentFilter, gate_of, list_experiments, set_gate_policy


def test_pages_go_newest_first_and_end(store: Store) -> None:
    ids = [seed(store, at=1000.0 + i) for i in range(7)]
    first = list_experiments(store, teams=None, limit=3)
    assert [s.id for s in first.items] == ids[::-1][:3]
    second = list_experiments(store, teams=None, before=first.next_before, limit=3)
    third = list_experiments(store, teams=None, before=second.next_before, limit=3)
    assert [s.id for s in second.items + third.items] == ids[::-1][3:]
    assert third.next_before is None


def test_a_team_sees_only_its_own(store: Store) -> None:
    mine = seed(store, team="demo")
    seed(store, team="other")
    page = list_experiments(store, teams=["demo"])
    assert [s.id for s in page.items] == [mine]


def test_filters_by_verdict_phase_service_kind_and_date(store: Store) -> None:
    failing = seed(store, label="regression", effect=0.05, at=10.0)
    passing = seed(store, at=20.0)
    running = seed(store, phase="running", service="web", at=30.0)
    failed = seed(store, phase="failed", kind="aa", at=40.0)

    def ids(**kw: object) -> list[int]:
        page = list_experiments(store, teams=None, filters=ExperimentFilter(**kw))  # type: ignore[arg-type]
        return [s.id for s in page.items]

    assert ids(verdict="fail") == [failing]
    assert ids(verdict="pass") == [passing]
    assert ids(verdict="pending") == [running]
    assert ids(verdict="error") == [failed]
    assert ids(phase="active") == [running]
    assert ids(service="web") == [running]
    assert ids(kind="aa") == [failed]
    assert ids(since=15.0, until=35.0) == [running, passing]


def test_the_summary_counts_trials_and_open_regressions(store: Store) -> None:
    running = seed(store, phase="running", trials=4)
    failing = seed(store, label="regression", effect=0.05)
    by_id = {s.id: s for s in list_experiments(store, teams=None).items}
    assert (by_id[running].trials_done, by_id[running].trials) == (1, 4)
    assert by_id[running].verdict == "pending"
    assert (by_id[failing].regressions, by_id[failing].verdict) == (1, "fail")


def test_a_filter_that_cannot_match_is_named(store: Store) -> None:
    with pytest.raises(HairlineError, match="phase 'runing'"):
        list_experiments(store, teams=None, filters=ExperimentFilter(phase="runing"))


def test_the_gate_fails_on_a_regression_until_it_is_ignored(store: Store) -> None:
    failing = seed(store, label="regression", effect=0.05)
    gate = gate_of(store, failing)
    assert gate.answer == "fail"
    assert "cpu_ns_per_request of B" in gate.reason
    with store.transaction() as session:
        session.add(
            Triage(experiment_id=failing, metric="cpu_ns_per_request", candidate="B",
                   state="ignored", actor="admin", note="expected", at=1.0)
        )  # fmt: skip
    gate = gate_of(store, failing)
    assert gate.answer == "pass"
    assert gate.reason == (
        "no regression; 1 regression(s) ignored by triage (of 1 deciding verdict(s))"
    )
    assert gate.regressions[0].triage == "ignored"


def test_an_inconclusive_verdict_fails_the_gate_unless_the_services_policy_passes_it(
    store: Store,
) -> None:
    """An A/A whose interval reached past its threshold once answered "pass (no
    regression)", exit 0, without the word inconclusive (issue 28)."""
    unsure = seed(store, kind="aa", label="inconclusive", effect=0.0194)
    settled = seed(store, kind="aa", at=2.0e9)
    gate = gate_of(store, unsure)
    assert gate.answer == "fail" and gate.deciding == 1 and not gate.inconclusive_passes
    assert [(i.metric, i.candidate) for i in gate.inconclusive] == [("cpu_ns_per_request", "B")]
    assert gate.reason == (
        "1 inconclusive (cpu_ns_per_request of B), which do not pass (of 1 deciding verdict(s))"
    )
    # The list says what the gate says, and filters alike.
    listed = {s.id: s.verdict for s in list_experiments(store, teams=None).items}
    assert listed == {unsure: "fail", settled: "pass"}
    fails = list_experiments(store, teams=None, filters=ExperimentFilter(verdict="fail"))
    assert [s.id for s in fails.items] == [unsure]

    set_gate_policy(store, "api", "pass", actor="admin")
    gate = gate_of(store, unsure)
    assert gate.answer == "pass" and gate.inconclusive_passes
    assert "passed by the service's gate policy" in gate.reason
    assert gate.reason.startswith("no regression; 1 inconclusive")
    assert {s.id: s.verdict for s in list_experiments(store, teams=None).items}[unsure] == "pass"
    with store.transaction() as session:
        trail = session.query(AuditEntry).filter_by(action="gate.policy").one()
    assert (trail.actor, trail.target, trail.detail) == ("admin", "api", "inconclusive: pass")


def test_a_gate_policy_names_a_known_service_and_a_known_rule(store: Store) -> None:
    seed(store, service="api")
    with pytest.raises(HairlineError, match="'maybe' is not a gate policy"):
        set_gate_policy(store, "api", "maybe", actor="admin")
    with pytest.raises(HairlineError, match="no service 'nope'"):
        set_gate_policy(store, "nope", "pass", actor="admin")


def test_the_gate_waits_while_active_and_errs_when_failed(store: Store) -> None:
    assert gate_of(store, seed(store, phase="analyzing")).answer == "pending"
    assert gate_of(store, seed(store, phase="cancelled")).answer == "error"
    assert gate_of(store, seed(store)).answer == "pass"
    with pytest.raises(HairlineError, match="no experiment 999"):
        gate_of(store, 999)
