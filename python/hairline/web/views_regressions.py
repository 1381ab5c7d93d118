"""The regressions page: open regressions (or all, with ``?triaged=1``), the acknowledge
and ignore buttons (a submit-scoped token of the experiment's team; stored and audited,
web/triage.py), and the audit trail of those decisions."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Form, Request, status
from fastapi.responses import RedirectResponse, Response

from hairline.errors import HairlineError
from hairline.web.auth import Principal
from hairline.web.deps import principal, require, store_of
from hairline.web.templating import page, teams_of
from hairline.web.triage import TRIAGE_STATES, audit_trail, regressions, triage

__all__ = ["router"]

router = APIRouter(include_in_schema=False)
Who = Annotated[Principal, Depends(principal)]
Triager = Annotated[Principal, Depends(require("triage"))]


def _page(request: Request, who: Principal, *, error: str = "", code: int = 200) -> Response:
    triaged = request.query_params.get("triaged", "") in ("1", "true", "on")
    store = store_of(request)
    return page(
        request, "regressions.html", who, status_code=code, error=error, triaged=triaged,
        rows=regressions(store, teams_of(who), triaged=triaged),
        audit=audit_trail(store, teams_of(who)), states=TRIAGE_STATES,
    )  # fmt: skip


@router.get("/regressions")
def regressions_page(request: Request, who: Who) -> Response:
    return _page(request, who)


@router.post("/regressions/triage")
def triage_regression(
    request: Request,
    who: Triager,
    experiment_id: Annotated[int, Form()],
    metric: Annotated[str, Form()],
    candidate: Annotated[str, Form()],
    state: Annotated[str, Form()],
    note: Annotated[str, Form()] = "",
) -> Response:
    try:
        triage(
            store_of(request), who, experiment_id=experiment_id, metric=metric,
            candidate=candidate, state=state, note=note.strip()[:2000],
        )  # fmt: skip
    except HairlineError as err:
        return _page(request, who, error=f"{err} ({err.hint})", code=422)
    back = "/regressions" + ("?triaged=1" if request.query_params.get("triaged") else "")
    return RedirectResponse(back, status_code=status.HTTP_303_SEE_OTHER)
