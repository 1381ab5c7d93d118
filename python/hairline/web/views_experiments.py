"""The experiments list and one experiment's page, with the fragments htmx polls while
something runs, and an arm's build log.

The list is one page of ``queries.list_experiments`` (keyset paging: the "older" link
passes ``before``); while a row on it is active its table body asks for itself again
every 2 s, and stops asking once nothing on it is. An experiment's page is the HTML
report's sections (report/html/page.py) with the hosts of each arm side by side and links
to the build logs; while it runs, its status line polls the same way and the page reloads
once, when it ends, to show the verdicts.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request, status
from fastapi.responses import FileResponse, Response

from hairline.errors import HairlineError
from hairline.report.experiment import load_report
from hairline.report.html.page import REPORT_CSS, report_body
from hairline.store.models import ACTIVE_PHASES, PHASES
from hairline.web.auth import Principal
from hairline.web.deps import principal, store_of
from hairline.web.pagedata import arm_build_logs, experiment_hosts, service_names
from hairline.web.queries import (
    GATE_ANSWERS,
    ExperimentFilter,
    experiment_team,
    gate_of,
    trial_counts,
)
from hairline.web.queries import list_experiments as query_experiments
from hairline.web.templating import Markup, page, teams_of

__all__ = ["PAGE_SIZE", "parse_filters", "router"]

router = APIRouter(include_in_schema=False)
Who = Annotated[Principal, Depends(principal)]
PAGE_SIZE = 50
_FILTER_FIELDS = ("service", "team", "phase", "verdict", "kind", "since", "until")


def _day(field: str, text: str) -> float:
    try:
        day = datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        raise HairlineError(
            f"{field} {text!r} is not a date", hint=f"write {field} as YYYY-MM-DD (UTC)"
        ) from None
    return day.timestamp()


def parse_filters(params: dict[str, str]) -> ExperimentFilter:
    """The list's filters from its query string: empty fields are no filter; ``since`` and
    ``until`` are days (UTC), ``until`` inclusive. Bad values raise a HairlineError that
    names the field."""
    given = {k: params[k].strip() for k in _FILTER_FIELDS if params.get(k, "").strip()}
    since = _day("since", given["since"]) if "since" in given else None
    until = (
        (datetime.fromtimestamp(_day("until", given["until"]), UTC) + timedelta(days=1)).timestamp()
        if "until" in given
        else None
    )
    filters = ExperimentFilter(
        service=given.get("service"), team=given.get("team"), phase=given.get("phase"),
        verdict=given.get("verdict"), kind=given.get("kind"), since=since, until=until,
    )  # fmt: skip
    filters.check()
    return filters


def _before(text: str | None) -> int | None:
    if text is None or text == "":
        return None
    if not text.isdigit():
        raise HairlineError(f"before {text!r} is not an experiment id", hint="use the older link")
    return int(text)


def _listing(request: Request, who: Principal) -> dict[str, Any]:
    params = dict(request.query_params)
    query = {k: params[k] for k in _FILTER_FIELDS if params.get(k)}
    try:
        found = query_experiments(
            store_of(request), teams=teams_of(who), filters=parse_filters(params),
            before=_before(params.get("before")), limit=PAGE_SIZE,
        )  # fmt: skip
    except HairlineError as err:
        return {"error": f"{err} ({err.hint})" if err.hint else str(err), "items": (),
                "next_before": None, "query": query, "active": False, "before": ""}  # fmt: skip
    return {
        "error": "",
        "items": found.items,
        "next_before": found.next_before,
        "query": query,
        "active": any(item.active for item in found.items),
        "before": params.get("before", ""),
    }


@router.get("/experiments")
def experiments(request: Request, who: Who) -> Response:
    listing = _listing(request, who)
    return page(
        request, "experiments.html", who, status_code=422 if listing["error"] else 200,
        phases=("active", "ended", *PHASES), verdicts=GATE_ANSWERS,
        services=service_names(store_of(request), teams_of(who)), **listing,
    )  # fmt: skip


@router.get("/experiments/rows")
def experiment_rows(request: Request, who: Who) -> Response:
    """The list's table body alone, for htmx to swap in while something is active."""
    return page(request, "_experiment_rows.html", who, **_listing(request, who))


def _visible(request: Request, who: Principal, experiment_id: int) -> None:
    team = experiment_team(store_of(request), experiment_id)
    # Another team's experiment is as absent as a missing one: ids must not leak teams.
    if team is None or not who.sees(team):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no experiment {experiment_id}")


def _live(request: Request, experiment_id: int) -> dict[str, Any]:
    gate = gate_of(store_of(request), experiment_id)
    return {
        "experiment_id": experiment_id,
        "phase": gate.phase,
        "progress": gate.progress,
        "trials": trial_counts(store_of(request), experiment_id),
        "gate": gate,
        "active": gate.phase in ACTIVE_PHASES,
    }


@router.get("/experiments/{experiment_id}")
def experiment(request: Request, who: Who, experiment_id: int) -> Response:
    _visible(request, who, experiment_id)
    store = store_of(request)
    report = load_report(store, experiment_id)
    logs = arm_build_logs(store, experiment_id)
    return page(
        request, "experiment.html", who, report=report,
        report_css=Markup(REPORT_CSS), report_body=Markup(report_body(report)),
        hosts=experiment_hosts(store, experiment_id),
        logs={arm: (log.path.is_file(), log.failed) for arm, log in logs.items()},
        **_live(request, experiment_id),
    )  # fmt: skip


@router.get("/experiments/{experiment_id}/live")
def experiment_live(request: Request, who: Who, experiment_id: int) -> Response:
    """The status line alone; once the experiment has ended, htmx reloads the whole page
    (HX-Refresh) so that the verdicts appear."""
    _visible(request, who, experiment_id)
    live = _live(request, experiment_id)
    response = page(request, "_experiment_live.html", who, **live)
    if not live["active"] and request.headers.get("hx-request") == "true":
        response.headers["HX-Refresh"] = "true"
    return response


@router.get("/experiments/{experiment_id}/build-log/{arm}")
def build_log(request: Request, who: Who, experiment_id: int, arm: str) -> Response:
    """The build log the lab recorded for this arm, and no other file."""
    _visible(request, who, experiment_id)
    log = arm_build_logs(store_of(request), experiment_id).get(arm)
    path: Path | None = None if log is None else log.path
    if path is None or not path.is_file():
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, f"experiment {experiment_id} has no build log for {arm}"
        )
    return FileResponse(path, media_type="text/plain; charset=utf-8")
