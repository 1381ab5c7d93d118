"""The HTTP API, ``/api/v1``: experiments submitted, watched, cancelled and gated; services,
their metrics and their registered commands; events beside experiments (deployments,
maintenance) that reports of the experiments they overlapped warn about.

Every route needs a token (web/deps.py): ``read`` lists and shows, ``submit`` also submits
and cancels, ``admin`` also registers commands and sees every team. An experiment of
another team answers 403 (the token may not see it); one that does not exist, 404.
A user error anywhere is a JSON ``{"error", "hint"}`` (a file's problems add
``"problems"``, each with file, line, field, message and fix), never a traceback.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.routing import APIRoute
from sqlalchemy import func, select

from hairline.errors import ConfigError, HairlineError
from hairline.lab.events import TIME_FORMATS, add_event, list_events, parse_time
from hairline.lab.queue import enqueue, request_cancel
from hairline.store.db import Store
from hairline.store.models import Experiment, Service, Trial, VerdictRow
from hairline.web.apimodels import (
    ERROR_RESPONSES,
    MAX_WAIT_S,
    Cancelled,
    CommandIn,
    CommandOut,
    EventIn,
    EventOut,
    ExperimentList,
    ExperimentOut,
    FlaggerHook,
    FlaggerRefusal,
    GateInconclusiveOut,
    GateOut,
    GatePolicyIn,
    GateRegressionOut,
    JudgeQuery,
    MetricOut,
    Registration,
    ScorecardOut,
    ServiceOut,
    SubmitBody,
    Submitted,
    VerdictOut,
)
from hairline.web.auth import Principal, audit, principal_for
from hairline.web.commands import COMMAND_KINDS, list_commands, register_command, registered_set
from hairline.web.deps import TOKEN_REQUIRED, request_token, require, store_of
from hairline.web.judge import delivery_gate, flagger_request, scorecard_of, settled
from hairline.web.queries import (
    ExperimentFilter,
    ExperimentSummary,
    Gate,
    experiment_team,
    gate_junit,
    gate_of,
    list_experiments,
    service_teams,
    set_gate_policy,
)
from hairline.web.submit import problems_of, read_submission

__all__ = ["PENDING_RETRY_S", "router"]

# How long a client waiting on a pending gate should sleep before asking again: a trial
# takes tens of seconds, so asking more often only loads the server.
PENDING_RETRY_S = 5


class _ApiRoute(APIRoute):
    """Every route's user errors as JSON: a HairlineError by its kind, a bad request body
    as one 422 listing each field, an HTTPException (401, 403) in the same shape."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handle(request)
            except ConfigError as err:
                return _error(422, err.message.splitlines()[0], err.hint, problems_of(err))
            except HairlineError as err:
                return _error(getattr(err, "status", 400), err.message, err.hint)
            except HTTPException as err:
                return _error(err.status_code, str(err.detail), None, headers=err.headers)
            except RequestValidationError as err:
                problems = [
                    {"file": None, "line": None,
                     "field": ".".join(str(p) for p in e["loc"] if p != "body"),
                     "message": e["msg"], "fix": None}
                    for e in err.errors()
                ]  # fmt: skip
                return _error(422, "the request is not valid", "see each problem", problems)

        return guarded


def _error(
    code: int, message: str, hint: str | None, problems: list[dict[str, object]] | None = None,
    *, headers: Mapping[str, str] | None = None,
) -> JSONResponse:  # fmt: skip
    body: dict[str, object] = {"error": message, "hint": hint}
    if problems is not None:
        body["problems"] = problems
    return JSONResponse(body, status_code=code, headers=dict(headers or {}))


class _Refused(HairlineError):
    """A user error with the HTTP status it answers (404 missing, 409 conflicting state)."""

    def __init__(self, status_code: int, message: str, *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status = status_code


router = APIRouter(prefix="/api/v1", tags=["api"], route_class=_ApiRoute, responses=ERROR_RESPONSES)

# A database id is a signed 64-bit integer: a larger one in a URL is a 422 naming the
# bound, not an overflow in the database driver (a 500 the fuzzer found).
ExperimentId = Annotated[int, Path(ge=1, le=2**63 - 1, description="An experiment's id.")]

Reader = Depends(require("read"))
Submitter = Depends(require("submit"))
Admin = Depends(require("admin"))


# --- experiments ----------------------------------------------------------------------


def _link(request: Request, path: str) -> str:
    return str(request.base_url).rstrip("/") + path


def _visible(store: Store, who: Principal, experiment_id: int) -> None:
    """404 when there is no such experiment, 403 when it is another team's."""
    team = experiment_team(store, experiment_id)
    if team is None:
        raise _Refused(404, f"no experiment {experiment_id}",
                       hint="GET /api/v1/experiments lists yours")  # fmt: skip
    if not who.sees(team):
        raise _Refused(403, f"experiment {experiment_id} belongs to another team than {who.team!r}",
                       hint="use a token of the experiment's team")  # fmt: skip


@router.post("/experiments", status_code=201, response_model=Submitted)
def submit_experiment(body: SubmitBody, request: Request, who: Principal = Submitter) -> Submitted:
    """Submit an experiment: the same TOML as the CLI, validated the same way."""
    store = store_of(request)
    accepted = read_submission(
        store.home / "submissions", body.experiment, body.files,
        lambda service: registered_set(store, service),
    )  # fmt: skip
    config = accepted.config
    if not who.sees(config.team):
        shutil.rmtree(accepted.folder, ignore_errors=True)
        raise _Refused(403, f"token {who.name!r} submits for team {who.team!r}, "
                       f"not {config.team!r}",
                       hint=f'write team = "{who.team}" in the experiment file')  # fmt: skip
    experiment_id = enqueue(store, config, kind=body.kind, submitted_by=who.name, origin="api")
    audit(store, who.name, "experiment.submit", str(experiment_id),
          f"{body.kind} of {config.service.name} in {accepted.folder.name}")  # fmt: skip
    return Submitted(
        id=experiment_id,
        url=_link(request, f"/experiments/{experiment_id}"),
        status_url=_link(request, f"/api/v1/experiments/{experiment_id}"),
        gate_url=_link(request, f"/api/v1/experiments/{experiment_id}/gate"),
    )


@router.get("/experiments", response_model=ExperimentList)
def experiments(
    request: Request,
    who: Principal = Reader,
    service: str | None = None,
    team: str | None = None,
    phase: str | None = Query(None, description="a phase, or active | ended"),
    verdict: str | None = Query(None, description="pass | fail | pending | error"),
    kind: Literal["ab", "aa"] | None = None,
    since: float | None = Query(None, description="created at or after (Unix s)"),
    until: float | None = Query(None, description="created before (Unix s)"),
    before: int | None = Query(None, description="the previous page's next_before"),
    limit: int = Query(50, ge=1, le=500),
) -> ExperimentList:
    """Experiments newest first, a page at a time; only the token's team unless admin."""
    filters = ExperimentFilter(service=service, team=team, phase=phase, verdict=verdict,
                               kind=kind, since=since, until=until)  # fmt: skip
    teams = None if who.admin else (who.team,)
    page = list_experiments(store_of(request), teams=teams, filters=filters, before=before,
                            limit=limit)  # fmt: skip
    store = store_of(request)
    items = [_without_paths(store, item) for item in page.items]
    return ExperimentList(items=items, next_before=page.next_before)


@router.get("/experiments/{experiment_id}", response_model=ExperimentOut)
def experiment(
    experiment_id: ExperimentId, request: Request, who: Principal = Reader
) -> ExperimentOut:
    """An experiment's status, progress, trials and verdicts."""
    store = store_of(request)
    _visible(store, who, experiment_id)
    summary, verdicts = _detail(store, experiment_id)
    return ExperimentOut(
        **vars(summary), verdicts=verdicts,
        gate_url=_link(request, f"/api/v1/experiments/{experiment_id}/gate"),
    )  # fmt: skip


def _detail(store: Store, experiment_id: int) -> tuple[ExperimentSummary, list[VerdictOut]]:
    gate = gate_of(store, experiment_id)
    with store.transaction() as session:
        e, service = session.execute(
            select(Experiment, Service.name)
            .join(Service, Service.id == Experiment.service_id)
            .where(Experiment.id == experiment_id)
        ).one()
        counts = dict(
            session.execute(
                select(Trial.state, func.count())
                .where(Trial.experiment_id == experiment_id)
                .group_by(Trial.state)
            ).all()
        )
        verdicts = session.scalars(
            select(VerdictRow).where(VerdictRow.experiment_id == experiment_id)
            .order_by(VerdictRow.id)
        ).all()  # fmt: skip
        out = [VerdictOut.model_validate(v, from_attributes=True) for v in verdicts]
        failing = [r for r in gate.regressions if r.triage != "ignored"]
        summary = ExperimentSummary(
            id=e.id, service=service, team=e.team, kind=e.kind, phase=e.phase,
            progress=e.progress, failure=e.failure, verdict=gate.answer,
            regressions=len(failing), trials_done=counts.get("done", 0),
            trials=sum(counts.values()), created_at=e.created_at, finished_at=e.finished_at,
            submitted_by=e.submitted_by, origin=e.origin,
        )  # fmt: skip
    return _without_paths(store, summary), out


def public_text(store: Store, text: str) -> str:
    """``text`` with the lab's folder left out of every path in it: an experiment's
    progress and failure name its logs (``experiments/5/runs/t0b0a1-A.log``), and an API
    user learns nothing of the server's file system from them."""
    home = str(store.home).rstrip("/") + "/"
    return text.replace(home, "")


def _without_paths(store: Store, summary: ExperimentSummary) -> ExperimentSummary:
    failure = None if summary.failure is None else public_text(store, summary.failure)
    return dataclasses.replace(
        summary, progress=public_text(store, summary.progress), failure=failure
    )


@router.post("/experiments/{experiment_id}/cancel", response_model=Cancelled)
def cancel(experiment_id: ExperimentId, request: Request, who: Principal = Submitter) -> Cancelled:
    """Cancel a queued or running experiment of the token's team."""
    store = store_of(request)
    _visible(store, who, experiment_id)
    try:
        result = request_cancel(store, experiment_id)
    except HairlineError as err:
        raise _Refused(409, err.message, hint=err.hint) from None
    audit(store, who.name, "experiment.cancel", str(experiment_id), result)
    return Cancelled(id=experiment_id, result="requested" if result == "requested" else "cancelled")


@router.get("/experiments/{experiment_id}/gate", response_model=GateOut)
async def gate(
    experiment_id: ExperimentId,
    request: Request,
    response: Response,
    query: Annotated[JudgeQuery, Query()],
    who: Principal = Reader,
) -> GateOut:
    """What a release pipeline blocks on: pass, fail, pending (with Retry-After) or error;
    ``gate`` and ``score`` for progressive delivery (web/judge.py). With ``wait_s`` the
    answer waits up to that long while the experiment runs."""
    store = store_of(request)
    await asyncio.to_thread(_visible, store, who, experiment_id)
    found = await settled(lambda: gate_of(store, experiment_id), query.wait_s)
    if found.answer == "pending":
        response.headers["Retry-After"] = str(PENDING_RETRY_S)
    return await asyncio.to_thread(_gate_out, store, found, query)


def _gate_out(store: Store, found: Gate, query: JudgeQuery) -> GateOut:
    card = scorecard_of(store, found, query)
    return GateOut(
        id=found.experiment_id, answer=found.answer,  # type: ignore[arg-type]
        gate=delivery_gate(found, card, query.judge),  # type: ignore[arg-type]
        judge=query.judge, score=None if card is None else card.score,
        phase=found.phase, progress=public_text(store, found.progress),
        reason=public_text(store, found.reason),
        regressions=[GateRegressionOut.model_validate(r, from_attributes=True)
                     for r in found.regressions],
        inconclusive=[GateInconclusiveOut.model_validate(r, from_attributes=True)
                      for r in found.inconclusive],
        deciding=found.deciding, inconclusive_passes=found.inconclusive_passes,
        scorecard=None if card is None else ScorecardOut.model_validate(card,
                                                                        from_attributes=True),
    )  # fmt: skip


@router.post(
    "/webhooks/flagger", response_model=GateOut,
    responses={code: {"model": FlaggerRefusal, "description": what} for code, what in (
        (409, "The experiment is still running (Retry-After): Flagger counts a failed check."),
        (412, "The gate is fail, inconclusive or error: Flagger counts a failed check."))},
)  # fmt: skip
async def flagger_webhook(body: FlaggerHook, request: Request) -> Any:
    """A Flagger webhook (pre-rollout, rollout, confirm-promotion): 200 with the gate when
    it passes, else 409 (running) or 412. Flagger sends no headers: the token may come as
    ``metadata.token``, the experiment as ``metadata.experiment`` (docs/ci.md)."""
    store = store_of(request)
    experiment_id, query, token = flagger_request(body.metadata, request_token(request))
    who = await asyncio.to_thread(principal_for, store, token)
    if who is None:
        raise HTTPException(401, detail=TOKEN_REQUIRED + ", or metadata.token in a webhook")
    await asyncio.to_thread(_visible, store, who, experiment_id)
    found = await settled(lambda: gate_of(store, experiment_id), query.wait_s)
    out = await asyncio.to_thread(_gate_out, store, found, query)
    if out.gate == "pass":
        return out
    pending = out.gate == "pending"
    refusal = FlaggerRefusal(
        error=f"experiment {experiment_id} does not pass: {out.gate}: {out.reason}",
        hint=(f"asked again on Flagger's next check; raise the webhook's timeout and "
              f"metadata.wait_s (up to {MAX_WAIT_S:g}) to wait longer" if pending else
              f"see GET /api/v1/experiments/{experiment_id}/gate or the dashboard"),
        gate=out.gate, score=out.score,  # type: ignore[arg-type]
    )  # fmt: skip
    headers = {"Retry-After": str(PENDING_RETRY_S)} if pending else {}
    return JSONResponse(refusal.model_dump(), status_code=409 if pending else 412,
                        headers=headers)  # fmt: skip


@router.get("/experiments/{experiment_id}/report.md", response_class=PlainTextResponse)
def report_markdown(experiment_id: ExperimentId, request: Request, who: Principal = Reader) -> Any:
    """The Markdown report, for a pull request's comment."""
    from hairline.report.experiment import load_report
    from hairline.report.markdown import render_markdown

    store = store_of(request)
    _visible(store, who, experiment_id)
    text = render_markdown(load_report(store, experiment_id))
    return PlainTextResponse(text, media_type="text/markdown; charset=utf-8")


@router.get("/experiments/{experiment_id}/report.xml", response_class=PlainTextResponse)
def report_junit(experiment_id: ExperimentId, request: Request, who: Principal = Reader) -> Any:
    """The verdicts as JUnit XML, judged as the gate judges them (report/junit.py)."""
    store = store_of(request)
    _visible(store, who, experiment_id)
    return PlainTextResponse(gate_junit(store, experiment_id), media_type="application/xml")


# --- services -------------------------------------------------------------------------


@router.get("/services", response_model=list[ServiceOut])
def services(request: Request, who: Principal = Reader) -> list[ServiceOut]:
    """Services with experiments the token may see, and how many."""
    query = (
        select(Service.name, func.count(Experiment.id), func.max(Experiment.created_at))
        .join(Experiment, Experiment.service_id == Service.id)
        .group_by(Service.name)
        .order_by(Service.name)
    )
    if not who.admin:
        query = query.where(Experiment.team == who.team)
    with store_of(request).autocommit() as connection:
        rows = connection.execute(query).all()
    return [ServiceOut(name=n, experiments=c, last_at=t) for n, c, t in rows]


@router.get("/services/{name}/metrics", response_model=list[MetricOut])
def service_metrics(name: str, request: Request, who: Principal = Reader) -> list[MetricOut]:
    """Each metric judged in the service's experiments, with its verdicts counted."""
    query = (
        select(VerdictRow.metric, VerdictRow.label, func.count())
        .join(Experiment, Experiment.id == VerdictRow.experiment_id)
        .join(Service, Service.id == Experiment.service_id)
        .where(Service.name == name)
        .group_by(VerdictRow.metric, VerdictRow.label)
    )
    if not who.admin:
        query = query.where(Experiment.team == who.team)
    with store_of(request).autocommit() as connection:
        rows = connection.execute(query).all()
    counts: dict[str, dict[str, int]] = {}
    for metric, label, count in rows:
        counts.setdefault(metric, {})[label] = count
    if not counts:
        raise _Refused(404, f"no verdicts of service {name!r} for team {who.team!r}",
                       hint="GET /api/v1/services lists the services")  # fmt: skip
    return [
        MetricOut(metric=m, verdicts=sum(c.values()), regression=c.get("regression", 0),
                  improvement=c.get("improvement", 0), no_change=c.get("no change", 0),
                  inconclusive=c.get("inconclusive", 0))
        for m, c in sorted(counts.items())
    ]  # fmt: skip


@router.get("/services/{name}/commands", response_model=list[CommandOut])
def commands(name: str, request: Request, who: Principal = Admin) -> list[CommandOut]:
    """The start and build commands registered for the service."""
    return [
        CommandOut.model_validate(r, from_attributes=True)
        for r in list_commands(store_of(request), name)
    ]


@router.post(
    "/services/{name}/commands", status_code=201, response_model=Registration,
    responses={200: {"model": Registration, "description": "Registered already: unchanged."}},
)  # fmt: skip
def register(
    name: str, body: CommandIn, request: Request, response: Response, who: Principal = Admin
) -> Registration:
    """Register a start or build command that files submitted for the service may name."""
    assert body.kind in COMMAND_KINDS
    new = register_command(store_of(request), service=name, kind=body.kind,
                           command=body.command, actor=who.name)  # fmt: skip
    if not new:
        response.status_code = status.HTTP_200_OK
    return Registration(registered=new)


@router.put("/services/{name}/gate", response_model=GatePolicyIn)
def gate_policy(
    name: str, body: GatePolicyIn, request: Request, who: Principal = Admin
) -> GatePolicyIn:
    """What an inconclusive deciding verdict does to the service's gate: fail (the
    default) or pass. Audited."""
    set_gate_policy(store_of(request), name, body.inconclusive, actor=who.name)
    return body


# --- events ---------------------------------------------------------------------------


@router.post("/events", status_code=201, response_model=EventOut)
def post_event(body: EventIn, request: Request, who: Principal = Submitter) -> EventOut:
    """Record a deployment, maintenance or other event of a service, downstream or host:
    every experiment whose runs it overlapped warns about it in its report."""
    store = store_of(request)
    owners = service_teams(store, body.service)
    if owners and not who.admin and who.team not in owners:
        # Another team's event would put a warning in their reports (a backdated "deploy"
        # casts doubt on every experiment it overlaps).
        raise _Refused(
            403,
            f"service {body.service!r} is team {', '.join(sorted(owners))}'s; token "
            f"{who.name!r} of team {who.team!r} may not record its events",
            hint="ask that team (or an admin) to record it",
        )
    now_s = time.time()
    added = add_event(
        store, body.kind, service=body.service, host=body.host,
        started_at=parse_time(body.at, now_s=now_s, flag="at"),
        ended_at=None if body.until is None else parse_time(body.until, now_s=now_s, flag="until"),
        note=body.note, created_by=who.name,
    )  # fmt: skip
    audit(store, who.name, "event.add", str(added.id), f"{added.kind} of {added.service}")
    return EventOut.model_validate(added, from_attributes=True)


@router.get("/events", response_model=list[EventOut])
def events(
    request: Request,
    who: Principal = Reader,
    since: str | None = Query(
        None, description=f"Only events going on at or after: {TIME_FORMATS}"
    ),
    limit: int = Query(200, ge=1, le=1000),
) -> list[EventOut]:
    """Events newest first; every team's, since a deployment touches them all."""
    since_s = None if since is None else parse_time(since, now_s=time.time(), flag="since")
    return [
        EventOut.model_validate(e, from_attributes=True)
        for e in list_events(store_of(request), since_s=since_s, limit=limit)
    ]
