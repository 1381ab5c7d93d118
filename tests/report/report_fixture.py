"""The report every renderer test starts from; each test file overrides what it checks."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

from hairline.lab.analysis import Analysis
from hairline.report.context import ArmReport, ExperimentReport, HostReport
from hairline.store.observations import Observations

ARMS = (
    ArmReport("A", "git 1a2b3c4 (main)", "k" * 64, True, Path("/lab/a.log")),
    ArmReport("B", "path /src/checkout", "j" * 64, False, Path("/lab/b.log")),
)
HOSTS = (
    HostReport(0, (0, 1), {"cpu_model": "Xeon", "kernel": "6.1"}),
    HostReport(1, (2, 3), {"cpu_model": "Xeon", "kernel": "6.1"}),
)


def make_report(
    observations: Observations | None = None, analysis: Analysis | None = None, **changes: object
) -> ExperimentReport:
    """A finished two-arm experiment of "checkout" on two hosts, as the lab reports it;
    ``changes`` replace any field (``analysis`` and ``observations`` included)."""
    base = ExperimentReport(
        experiment_id=7,
        service="checkout",
        kind="ab",
        phase="done",
        failure=None,
        created_at=datetime(2025, 3, 1, 12, 0, tzinfo=UTC),
        started_at=datetime(2025, 3, 1, 12, 1, tzinfo=UTC),
        finished_at=datetime(2025, 3, 1, 12, 9, tzinfo=UTC),
        design="fully-balanced",
        trials=4,
        trials_done=4,
        rate_per_s=400.0,
        duration_s=2.0,
        model="adaptive",
        arms=ARMS,
        hosts=HOSTS,
        analysis=analysis,
        observations=observations,
    )
    # Keyword changes win over the positional defaults, so callers can merge dicts freely.
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]
