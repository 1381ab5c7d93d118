"""The pages over many experiments: the services (/services), a service's metric history
with its change points (/services/NAME) and the A/A health of every service and metric
(/aa): the false-positive rate over a rolling window of A/A runs against its binomial
band, and the model adaptive selection chooses from those A/A runs (the analysis's own
rule, lab/results.aa_model_choices)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request, status
from fastapi.responses import Response

from hairline.lab.results import HistoryModel, aa_experiments, aa_model_choices
from hairline.store.db import Store
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
    model: HistoryModel | None  # None: the A/A runs left no observations to select on


# Selection scores every model on every A/A run (seconds for a long history): each
# service's choice is kept until its set of finished A/A runs or its alpha changes.
_ModelKey = tuple[str, tuple[int, ...], float]


def _history_models(request: Request, service: str, alpha: float) -> dict[str, HistoryModel]:
    store: Store = store_of(request)
    ids = aa_experiments(store, service)
    key: _ModelKey = (service, tuple(ids), alpha)
    cache: dict[_ModelKey, dict[str, HistoryModel]] | None = getattr(
        request.app.state, "aa_history_models", None
    )
    if cache is None:
        cache = request.app.state.aa_history_models = {}
    if key not in cache:
        for old in [k for k in cache if k[0] == service]:
            del cache[old]
        cache[key] = aa_model_choices(store, service, ids=ids, alpha=alpha)
    return cache[key]


@router.get("/aa")
def aa_health(request: Request, who: Who) -> Response:
    store = store_of(request)
    runs, alphas = aa_runs(store, teams_of(who))
    rows = []
    for (service_name, metric), found in runs.items():
        alpha = alphas.get(service_name, 0.05)
        points = fpr_over_time(found, alpha=alpha, window=AA_WINDOW_RUNS)
        rows.append(
            MetricHealthView(
                service=service_name,
                metric=metric,
                alpha=alpha,
                points=points,
                chart=Markup(fpr_svg(metric, points, alpha)),
                model=_history_models(request, service_name, alpha).get(metric),
            )
        )
    return page(request, "aa.html", who, rows=rows, window=AA_WINDOW_RUNS)
