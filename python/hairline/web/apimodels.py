"""The HTTP API's request and response models: the shapes /api/v1 reads and answers, which
the OpenAPI document (and Swagger UI at /api/v1/docs) shows. The routes are web/api.py's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

from hairline.lab.events import EVENT_KINDS, TIME_FORMATS
from hairline.web.queries import ExperimentSummary

__all__ = [
    "Cancelled",
    "CommandIn",
    "CommandOut",
    "EventIn",
    "EventOut",
    "ExperimentList",
    "ExperimentOut",
    "GateInconclusiveOut",
    "GateOut",
    "GatePolicyIn",
    "GateRegressionOut",
    "MetricOut",
    "Registration",
    "ServiceOut",
    "SubmitBody",
    "Submitted",
    "VerdictOut",
]


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


class GateOut(BaseModel):
    id: int
    answer: Literal["pass", "fail", "pending", "error"]
    phase: str
    progress: str
    reason: str
    regressions: list[GateRegressionOut]
    # Deciding verdicts that settled nothing: they fail the gate unless the service's policy
    # (inconclusive_passes, set by an admin) lets them pass.
    inconclusive: list[GateInconclusiveOut]
    deciding: int
    inconclusive_passes: bool


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
