"""``GET /metrics``: the lab for Prometheus, read from the database at each scrape.

A collector (:class:`LabCollector`) queries the store when Prometheus asks, instead of
counters kept in this process: the queue, the processors and the API write the same
database from several processes, and a restarted server must not start its counts from
zero. Each scrape is a handful of grouped, indexed queries whatever the size of the lab.

The route needs a token like every other (any live token; ``read`` is enough), sent as
Prometheus sends one (``authorization: credentials_file:``), and answers for what that
token sees: its team's experiments, every team's for an admin token. Its 401 is plain JSON
with ``WWW-Authenticate: Bearer``, not the login page.

Series (docs/dashboard.md, "Prometheus"):

- ``hairline_queue_depth{team}``: experiments queued, waiting for a processor;
  ``hairline_queue_oldest_age_seconds{team}``: how long the oldest has waited.
- ``hairline_experiments_running{team}``: experiments a processor is building, allocating,
  running or analysing.
- ``hairline_experiments_ended_total{team,kind,phase}``: experiments that ended done,
  failed or cancelled.
- ``hairline_verdicts_total{service,kind,result}``: deciding metric verdicts of finished
  experiments by label (regression, improvement, no change, inconclusive).
- ``hairline_aa_false_positive_rate{service,metric}`` and its parts over the dashboard's
  rolling window (``_false_positives``, ``_runs``, the binomial band's ``_band_low`` and
  ``_band_high``), ``hairline_aa_alpha{service}``: the /aa page's numbers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry
from sqlalchemy import func, select

from hairline.store.db import Store
from hairline.store.models import ACTIVE_PHASES, TERMINAL_PHASES, Experiment, Service, VerdictRow
from hairline.web.auth import Principal
from hairline.web.deps import require, store_of
from hairline.web.health import fpr_over_time
from hairline.web.pagedata import aa_runs
from hairline.web.templating import teams_of
from hairline.web.views_trends import AA_WINDOW_RUNS

__all__ = ["METRICS_PATH", "LabCollector", "router"]

METRICS_PATH = "/metrics"
_E = Experiment
_RUNNING = tuple(p for p in ACTIVE_PHASES if p != "queued")

router = APIRouter(include_in_schema=False)
Reader = Annotated[Principal, Depends(require("read"))]


class LabCollector:
    """The lab's series as ``teams`` see them (None: every team), read at ``collect``."""

    def __init__(
        self,
        store: Store,
        teams: Collection[str] | None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.teams = None if teams is None else tuple(teams)
        self.clock = clock

    def _seen(self, query: Any) -> Any:
        return query if self.teams is None else query.where(_E.team.in_(self.teams))

    def collect(self) -> Iterator[Metric]:
        yield from self._experiments()
        yield from self._verdicts()
        yield from self._aa()

    def _experiments(self) -> Iterator[Metric]:
        by_phase = self._seen(
            select(_E.team, _E.kind, _E.phase, func.count(), func.min(_E.created_at))
            .group_by(_E.team, _E.kind, _E.phase)
        )  # fmt: skip
        with self.store.autocommit() as connection:
            rows = connection.execute(by_phase).all()
        now = self.clock()
        queued = GaugeMetricFamily(
            "hairline_queue_depth", "Experiments queued, waiting for a processor", labels=["team"]
        )
        oldest = GaugeMetricFamily(
            "hairline_queue_oldest_age_seconds",
            "How long the oldest queued experiment has waited (0 when none is queued)",
            labels=["team"], unit="seconds",
        )  # fmt: skip
        running = GaugeMetricFamily(
            "hairline_experiments_running",
            "Experiments a processor is building, allocating, running or analysing",
            labels=["team"],
        )
        ended = CounterMetricFamily(
            "hairline_experiments_ended",
            "Experiments that ended: done, failed or cancelled",
            labels=["team", "kind", "phase"],
        )
        depth: dict[str, int] = {}
        since: dict[str, float] = {}
        busy: dict[str, int] = {}
        for team, kind, phase, count, first in rows:
            depth.setdefault(team, 0)
            busy.setdefault(team, 0)
            if phase == "queued":
                depth[team] += count
                since[team] = min(since.get(team, first), first)
            elif phase in _RUNNING:
                busy[team] += count
            elif phase in TERMINAL_PHASES:
                ended.add_metric([team, kind, phase], count)
        for team in sorted(depth):
            queued.add_metric([team], depth[team])
            oldest.add_metric([team], max(0.0, now - since[team]) if team in since else 0.0)
            running.add_metric([team], busy[team])
        yield from (queued, oldest, running, ended)

    def _verdicts(self) -> Iterator[Metric]:
        counted = self._seen(
            select(Service.name, _E.kind, VerdictRow.label, func.count())
            .join(_E, _E.id == VerdictRow.experiment_id)
            .join(Service, Service.id == _E.service_id)
            .where(VerdictRow.deciding, _E.phase == "done")
            .group_by(Service.name, _E.kind, VerdictRow.label)
        )  # fmt: skip
        with self.store.autocommit() as connection:
            rows = connection.execute(counted).all()
        verdicts = CounterMetricFamily(
            "hairline_verdicts",
            "Deciding metric verdicts of finished experiments, by label",
            labels=["service", "kind", "result"],
        )
        for service, kind, label, count in sorted(rows):
            verdicts.add_metric([service, kind, label], count)
        yield verdicts

    def _aa(self) -> Iterator[Metric]:
        runs, alphas = aa_runs(self.store, self.teams)
        labels = ["service", "metric"]
        window = f"the last {AA_WINDOW_RUNS} A/A runs"
        rate = GaugeMetricFamily(
            "hairline_aa_false_positive_rate",
            f"Share of {window} that flagged the metric (the /aa page's rate)", labels=labels,
        )  # fmt: skip
        flagged = GaugeMetricFamily(
            "hairline_aa_false_positives", f"A/A runs that flagged the metric in {window}",
            labels=labels,
        )  # fmt: skip
        counted = GaugeMetricFamily(
            "hairline_aa_runs", f"A/A runs in the window ({window}, fewer while young)",
            labels=labels,
        )  # fmt: skip
        low = GaugeMetricFamily(
            "hairline_aa_band_low",
            "Fewest false positives a calibrated model shows in the window, 95% of the time",
            labels=labels,
        )
        high = GaugeMetricFamily(
            "hairline_aa_band_high",
            "Most false positives a calibrated model shows in the window, 95% of the time "
            "(more: the model claims changes more often than alpha)",
            labels=labels,
        )
        alpha = GaugeMetricFamily(
            "hairline_aa_alpha", "The alpha of the service's newest A/A run", labels=["service"]
        )
        for (service, metric), found in runs.items():
            points = fpr_over_time(found, alpha=alphas.get(service, 0.05), window=AA_WINDOW_RUNS)
            newest = points[-1]
            key = [service, metric]
            rate.add_metric(key, newest.rate)
            flagged.add_metric(key, newest.false_positives)
            counted.add_metric(key, newest.runs)
            low.add_metric(key, newest.band_low)
            high.add_metric(key, newest.band_high)
        for service, value in sorted(alphas.items()):
            alpha.add_metric([service], value)
        yield from (rate, flagged, counted, low, high, alpha)


@router.get(METRICS_PATH)
def metrics(request: Request, who: Reader) -> Response:
    """The lab's series in Prometheus's text format (OpenMetrics when asked for)."""
    registry = CollectorRegistry()
    registry.register(LabCollector(store_of(request), teams_of(who)))
    encode, content_type = choose_encoder(request.headers.get("accept", ""))
    return Response(encode(registry), media_type=content_type)
