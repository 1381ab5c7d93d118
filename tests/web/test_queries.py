"""The dashboard's reads: the experiments list a page at a time, and the gate."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hairline.errors import HairlineError
from hairline.store.db import Store, open_store
from hairline.store.models import Experiment, Service, Triage, Trial, VerdictRow
from hairline.web.queries import ExperimentFilter, gate_of, list_experiments


@pytest.fixture
def store(db_url: str, tmp_path: Path) -> Iterator[Store]:
    s = open_store(db_url, home=tmp_path / "home")
    yield s
    s.close()


def add(
    store: Store, *, service: str = "api", team: str = "demo", phase: str = "done",
    kind: str = "ab", regression: bool = False, created_at: float = 1000.0, trials: int = 3,
) -> int:  # fmt: skip
    with store.transaction() as session:
        row = session.query(Service).filter_by(name=service).one_or_none()
        if row is None:
            row = Service(name=service, created_at=0.0)
            session.add(row)
            session.flush()
        e = Experiment(
            service_id=row.id, kind=kind, team=team, phase=phase, spec="{}", source_file="f",
            artifacts_dir="", progress=phase, created_at=created_at, updated_at=created_at,
            claims=0, cancel_requested=False,
        )  # fmt: skip
        session.add(e)
        session.flush()
        for index in range(trials):
            state = "done" if phase == "done" or index == 0 else "pending"
            session.add(Trial(experiment_id=e.id, index=index, state=state, attempts=1))
        session.add(
            VerdictRow(
                experiment_id=e.id, metric="cpu_ns_per_request", candidate="B", baseline="A",
                deciding=True, label="regression" if regression else "no change",
                model="paired-t", model_reason="", relative_effect=0.05 if regression else 0.0,
                ci_low=0.03, ci_high=0.07, p_value=0.001, threshold="1%", direction="lower",
            )
        )  # fmt: skip
        return e.id


def test_pages_go_newest_first_and_end(store: Store) -> None:
    ids = [add(store, created_at=1000.0 + i) for i in range(7)]
    first = list_experiments(store, teams=None, limit=3)
    assert [s.id for s in first.items] == ids[::-1][:3]
    second = list_experiments(store, teams=None, before=first.next_before, limit=3)
    third = list_experiments(store, teams=None, before=second.next_before, limit=3)
    assert [s.id for s in second.items + third.items] == ids[::-1][3:]
    assert third.next_before is None


def test_a_team_sees_only_its_own(store: Store) -> None:
    mine = add(store, team="demo")
    add(store, team="other")
    page = list_experiments(store, teams=["demo"])
    assert [s.id for s in page.items] == [mine]


def test_filters_by_verdict_phase_service_kind_and_date(store: Store) -> None:
    failing = add(store, regression=True, created_at=10.0)
    passing = add(store, created_at=20.0)
    running = add(store, phase="running", service="web", created_at=30.0)
    failed = add(store, phase="failed", kind="aa", created_at=40.0)

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
    running = add(store, phase="running", trials=4)
    failing = add(store, regression=True)
    by_id = {s.id: s for s in list_experiments(store, teams=None).items}
    assert (by_id[running].trials_done, by_id[running].trials) == (1, 4)
    assert by_id[running].verdict == "pending"
    assert (by_id[failing].regressions, by_id[failing].verdict) == (1, "fail")


def test_a_filter_that_cannot_match_is_named(store: Store) -> None:
    with pytest.raises(HairlineError, match="phase 'runing'"):
        list_experiments(store, teams=None, filters=ExperimentFilter(phase="runing"))


def test_the_gate_fails_on_a_regression_until_it_is_ignored(store: Store) -> None:
    failing = add(store, regression=True)
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
    assert "1 ignored" in gate.reason
    assert gate.regressions[0].triage == "ignored"


def test_the_gate_waits_while_active_and_errs_when_failed(store: Store) -> None:
    assert gate_of(store, add(store, phase="analyzing")).answer == "pending"
    assert gate_of(store, add(store, phase="cancelled")).answer == "error"
    assert gate_of(store, add(store)).answer == "pass"
    with pytest.raises(HairlineError, match="no experiment 999"):
        gate_of(store, 999)
