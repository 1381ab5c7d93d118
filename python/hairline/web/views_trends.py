"""The pages over many experiments: a service's metric history with its change points
(/services/NAME) and the
A/A health of every service and metric (/aa): the false-positive rate over a rolling
window of A/A runs against its binomial band, and the model the newest A/B used."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request, status
from fastapi.responses import Response

from hairline.web.auth import Principal
from hairline.web.changes import history_changes
from hairline.web.deps import principal, store_of
from hairline.web.health import FprPoint, fpr_over_time
from hairline.web.pagedata import ChosenModel, aa_runs, chosen_models, metric_history, service_names
from hairline.web.svg import fpr_svg, history_svg
from hairline.web.templating import Markup, page, teams_of

__all__ = ["AA_WINDOW_RUNS", "router"]

router = APIRouter(include_in_schema=False)
Who = Annotated[Principal, Depends(principal)]
# Twenty runs: at alpha 0.05 a calibrated model shows 0 to 3 false positives in them, so a
# model twice as loose shows up above the band within a few days of two-hourly runs.
AA_WINDOW_RUNS = 20


@router.get("/services")
def services(request: Request, who: Who) -> Response:
    names = service_names(store_of(request), teams_of(who))
    return page(request, "services.html", who, services=names)


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
    model: ChosenModel | None


@router.get("/aa")
def aa_health(request: Request, who: Who) -> Response:
    store = store_of(request)
    runs, alphas = aa_runs(store, teams_of(who))
    models = chosen_models(store, teams_of(who))
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
                model=models.get((service_name, metric)),
            )
        )
    return page(request, "aa.html", who, rows=rows, window=AA_WINDOW_RUNS)
