"""The pages over many experiments: the services (/services), a service's metric history
with its change points (/services/NAME) and the A/A health of every service and metric
(/aa): the false-positive rate over a rolling window of A/A runs against its binomial
band, and the model adaptive selection chooses from those A/A runs (web/aamodels.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request, status
from fastapi.responses import Response

from hairline.lab.results import HistoryModel
from hairline.web.aamodels import HistoryModels, Scored
from hairline.web.auth import Principal
from hairline.web.changes import history_changes
from hairline.web.deps import principal, store_of
from hairline.web.health import FprPoint, fpr_over_time
from hairline.web.pagedata import aa_runs, metric_history, service_names, service_overview
from hairline.web.svg import fpr_svg, history_svg
from hairline.web.templating import Markup, page, teams_of
from hairline.web.triage import open_regression_counts

__all__ = ["AA_WINDOW_RUNS", "router"]

router = APIRouter(include_in_schema=False)
Who = Annotated[Principal, Depends(principal)]
# Twenty runs: at alpha 0.05 a calibrated model shows 0 to 3 false positives in them, so a
# model twice as loose shows up above the band within a few days of two-hourly runs.
AA_WINDOW_RUNS = 20


@router.get("/services")
def services(request: Request, who: Who) -> Response:
    store = store_of(request)
    rows = service_overview(store, teams_of(who), open_regression_counts(store, teams_of(who)))
    return page(request, "services.html", who, services=rows)


@router.get("/services/{name}")
def service(request: Request, who: Who, name: str) -> Response:
    store = store_of(request)
    if name not in service_names(store, teams_of(who)):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no service {name!r}")
    history = metric_history(store, name, teams_of(who))
    changes = history_changes(history)
    charts = [
        (metric, Markup(history_svg(metric, points, changes[metric])), points[-1],
         changes[metric])
        for metric, points in history.items()
    ]  # fmt: skip
    return page(request, "service.html", who, service=name, charts=charts)


@dataclass(frozen=True)
class MetricHealthView:
    service: str
    metric: str
    alpha: float
    points: tuple[FprPoint, ...]
    chart: Markup
    # None while the service's A/A runs are being scored (web/aamodels.py); a Scored
    # without this metric: its runs kept no observations of it.
    scored: Scored | None

    @property
    def model(self) -> HistoryModel | None:
        return None if self.scored is None else self.scored.models.get(self.metric)


@router.get("/aa")
def aa_health(request: Request, who: Who) -> Response:
    store = store_of(request)
    models: HistoryModels = request.app.state.aa_models
    runs, alphas = aa_runs(store, teams_of(who))
    rows = []
    scored: dict[tuple[str, float], Scored | None] = {}
    for (service_name, metric), found in runs.items():
        alpha = alphas.get(service_name, 0.05)
        if (service_name, alpha) not in scored:
            scored[(service_name, alpha)] = models.choices(service_name, alpha=alpha)
        points = fpr_over_time(found, alpha=alpha, window=AA_WINDOW_RUNS)
        rows.append(
            MetricHealthView(
                service=service_name,
                metric=metric,
                alpha=alpha,
                points=points,
                chart=Markup(fpr_svg(metric, points, alpha)),
                scored=scored[(service_name, alpha)],
            )
        )
    scoring = any(r.scored is None for r in rows)
    return page(request, "aa.html", who, rows=rows, window=AA_WINDOW_RUNS, scoring=scoring)
