"""Which regressions the dashboard lists as open (web/triage.py)."""

from __future__ import annotations

from webseed import seed

from hairline.store.db import Store
from hairline.web.triage import regressions


def test_a_bisections_steps_are_not_open_regressions(store: Store) -> None:
    found = seed(store, label="regression", effect=0.05)
    seed(store, label="regression", effect=0.40, origin="bisect")
    seed(store, label="no change", effect=0.001)
    assert [r.experiment_id for r in regressions(store, None)] == [found]
