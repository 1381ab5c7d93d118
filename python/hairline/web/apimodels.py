"""The HTTP API's request and response models: the shapes /api/v1 reads and answers, which
the OpenAPI document (and Swagger UI at /api/v1/docs) shows. The routes are web/api.py's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

from hairline.lab.events import EVENT_KINDS, TIME_FORMATS
from hairline.web.queries import ExperimentSummary

__all__ = [
    "ERROR_RESPONSES",
    "MAX_WAIT_S",
    "Cancelled",
    "CommandIn",
    "CommandOut",
    "ErrorOut",
    "EventIn",
    "EventOut",
    "ExperimentList",
    "ExperimentOut",
    "FlaggerHook",
    "FlaggerRefusal",
    "GateInconclusiveOut",
    "GateOut",
    "GatePolicyIn",
    "GateRegressionOut",
    "JudgeQuery",
    "MetricOut",
    "ProblemOut",
    "Registration",
    "ScoreGroupOut",
    "ScorecardOut",
    "ScoredMetricOut",
    "ServiceOut",
    "SubmitBody",
    "Submitted",
    "VerdictOut",
]


class ProblemOut(BaseModel):
    """One problem of a request or a submitted file: where (file, line, field), what, and
    the fix."""

    file: str | None = None
    line: int | None = None
    field: str | None = None
    message: str
    fix: str | None = None


class ErrorOut(BaseModel):
    """Every 4xx answer of /api/v1: what was wrong, the fix, and a file's or a request's
    problems one by one where there are several."""

    error: str
    hint: str | None = None
    problems: list[ProblemOut] | None = None


# The user errors any route may answer, declared in the OpenAPI document so that a client
# (and schemathesis, which counted 20 routes answering statuses they did not declare) knows
# them: 401 without a valid token, 403 for another team's or a lower scope, 404 for what
# does not exist, 409 for a state that forbids it, 413/429 from the limits in front of the
# app, 400/422 for a request or file that is not valid.
ERROR_RESPONSES: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorOut, "description": what}
    for code, what in (
        (400, "The request cannot be carried out as given (the error says why)."),
        (401, "No token, or one that is unknown, expired or revoked."),
        (403, "The token's team or scope does not allow this."),
        (404, "No such experiment, service or command."),
        (409, "The experiment's state does not allow this now."),
        (413, "The body is larger than this path allows."),
        (422, "The request or the submitted file is not valid: each problem is listed."),
        (429, "Too many requests: try again after Retry-After seconds."),
    )
}


class SubmitBody(BaseModel):
    experiment: str = Field(description="The experiment file's TOML, as `hairline run` reads.")
    files: dict[str, str] = Field(
        default_factory=dict,
        description="Files it names, by name (one folder, no '/'): service.toml, the trace.",
    )
    kind: Literal["ab", "aa"] = "ab"


class Submitted(BaseModel):
    id: int
    url: str
    status_url: str
    gate_url: str


class ExperimentList(BaseModel):
    items: list[ExperimentSummary]
    next_before: int | None = Field(description="Pass as `before` for the next page.")


class VerdictOut(BaseModel):
    metric: str
    candidate: str
    baseline: str | None
    deciding: bool
    label: str
    model: str
    relative_effect: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    threshold: str


@dataclass(frozen=True)
class ExperimentOut(ExperimentSummary):
    """An experiment as the list shows it, with its verdicts."""

    verdicts: list[VerdictOut]
    gate_url: str


class Cancelled(BaseModel):
    id: int
    result: Literal["cancelled", "requested"]


class GateRegressionOut(BaseModel):
    metric: str
    candidate: str
    baseline: str | None
    relative_effect: float | None
    ci_low: float | None
    ci_high: float | None
    triage: str | None


class GateInconclusiveOut(BaseModel):
    metric: str
    candidate: str
    relative_effect: float | None
    ci_low: float | None
    ci_high: float | None


class ScoredMetricOut(BaseModel):
    metric: str
    candidate: str
    group: str
    classification: Literal["pass", "high", "low", "inconclusive"]
    passed: bool


class ScoreGroupOut(BaseModel):
    name: str
    weight: float
    critical: bool
    metrics: int
    passed: int
    score: float | None


class ScorecardOut(BaseModel):
    """The Kayenta-style score of the deciding verdicts (report/scorecard.py)."""

    score: float | None = Field(description="0-100; null with no verdict to score")
    result: Literal["pass", "marginal", "fail", "nodata"]
    pass_score: float
    marginal_score: float
    reason: str
    groups: list[ScoreGroupOut]
    metrics: list[ScoredMetricOut]
    ungrouped: list[str] = Field(description="Metrics no group names: not scored.")


# How long one request may wait for a pending experiment to end (``wait_s``).
MAX_WAIT_S = 600.0


class JudgeQuery(BaseModel):
    """How a progressive-delivery tool asks the gate (query parameters of GET .../gate, or
    a Flagger webhook's metadata): which judge decides ``gate``, the score's weights and
    thresholds for this request, and how long to wait while the experiment runs."""

    judge: Literal["gate", "score"] = Field(
        "gate", description="gate: the verdicts, as `hairline gate`; score: the score's result"
    )
    weights: str | None = Field(
        None, description="Group weights for this request, e.g. cpu:3,memory:1", max_length=2000
    )
    pass_score: float | None = Field(None, ge=0, le=100)
    marginal_score: float | None = Field(None, ge=0, le=100)
    wait_s: float = Field(
        0.0, ge=0, le=MAX_WAIT_S, description="Wait up to this long while the experiment runs"
    )


class GateOut(BaseModel):
    id: int
    answer: Literal["pass", "fail", "pending", "error"]
    # For progressive delivery (Argo Rollouts' successCondition `result == "pass"`,
    # failureCondition `result == "fail"`): "inconclusive" where the only thing failing the
    # answer is inconclusive verdicts (or, judged by score, a marginal score).
    gate: Literal["pass", "fail", "inconclusive", "pending", "error"]
    judge: Literal["gate", "score"]
    score: float | None = Field(description="The scorecard's score; null until it ends")
    phase: str
    progress: str
    reason: str
    regressions: list[GateRegressionOut]
    # Deciding verdicts that settled nothing: they fail the gate unless the service's policy
    # (inconclusive_passes, set by an admin) lets them pass.
    inconclusive: list[GateInconclusiveOut]
    deciding: int
    inconclusive_passes: bool
    scorecard: ScorecardOut | None


class FlaggerHook(BaseModel):
    """What Flagger POSTs to a webhook. ``metadata`` (strings) carries ``experiment`` (the
    id), ``token`` (Flagger sends no headers) and any of JudgeQuery's fields."""

    name: str = ""
    namespace: str = ""
    phase: str = ""
    checksum: str = ""
    metadata: dict[str, str] = Field(default_factory=dict)


class FlaggerRefusal(BaseModel):
    """A webhook's answer when the release may not go on (Flagger logs the body)."""

    error: str
    hint: str | None = None
    gate: Literal["fail", "inconclusive", "pending", "error"]
    score: float | None


class GatePolicyIn(BaseModel):
    inconclusive: Literal["fail", "pass"]


class ServiceOut(BaseModel):
    name: str
    experiments: int
    last_at: float | None


class MetricOut(BaseModel):
    metric: str
    verdicts: int
    regression: int
    improvement: int
    no_change: int
    inconclusive: int


class CommandIn(BaseModel):
    # "env": ``command`` is an environment key the service's submissions may set.
    kind: Literal["start", "build", "env"]
    command: str = Field(min_length=1)


class CommandOut(BaseModel):
    service: str
    kind: str
    command: str
    registered_by: str
    created_at: float


class Registration(BaseModel):
    registered: bool = Field(description="False when the command was registered already.")


class EventIn(BaseModel):
    kind: str = Field(description=" | ".join(EVENT_KINDS))
    service: str = Field(min_length=1, description="The service or downstream (host:port).")
    host: str | None = Field(None, description="The host (or machine) it touched, if one.")
    at: str = Field("now", description=f"When it started: {TIME_FORMATS}.")
    until: str | None = Field(None, description="When it ended (default: a point in time).")
    note: str = ""


class EventOut(BaseModel):
    id: int
    kind: str
    service: str
    host: str | None
    started_at: float = Field(description="Unix s")
    ended_at: float | None = Field(description="Unix s; null: a point in time")
    note: str
    created_by: str
