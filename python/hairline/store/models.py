"""The lab's tables (SQLAlchemy 2 declarative models; migrations in ``migrations/``).

Times are Unix seconds (``float``) in every column named ``*_at``: one representation that
compares the same way in SQLite and PostgreSQL, with no time-zone handling to get wrong.
Observations are not rows here: each trial's observations are one Parquet file in the
experiment's artifact folder, and the database points to it.
"""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    true,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "AaSchedule",
    "ApiToken",
    "Arm",
    "AuditEntry",
    "Base",
    "Build",
    "Experiment",
    "Host",
    "LabEvent",
    "Quota",
    "RegionQuota",
    "RegisteredCommand",
    "Run",
    "Service",
    "Triage",
    "Trial",
    "TuningEvaluation",
    "TuningRun",
    "VerdictRow",
]

# The lifecycle (ServiceLab section 4). Terminal phases are never claimed again.
PHASES = ("queued", "building", "allocating", "running", "analyzing", "done", "failed", "cancelled")
ACTIVE_PHASES = ("queued", "building", "allocating", "running", "analyzing")
TERMINAL_PHASES = ("done", "failed", "cancelled")


class Base(DeclarativeBase):
    pass


class Service(Base):
    __tablename__ = "services"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[float] = mapped_column(Float)
    # "fail" (the default) or "pass": what an inconclusive deciding verdict does to the
    # service's gate. Only an admin changes it (`hairline service gate`).
    gate_inconclusive: Mapped[str] = mapped_column(String(8), server_default="fail")


class Experiment(Base):
    """One experiment and its place in the durable queue.

    A processor owns the row while ``lease_owner`` is its id and ``lease_expires_at`` is in
    the future; it renews the lease while it works. Any processor may claim a row in an
    active phase whose lease is empty or expired.
    """

    __tablename__ = "experiments"
    __table_args__ = (
        Index("ix_experiments_claim", "phase", "priority", "id"),
        # The experiments processors hold now (fairness counts them): a few rows of many.
        Index("ix_experiments_lease", "lease_expires_at"),
        # The dashboard's list, newest first, filtered by team or service: keyset paging on
        # id stays one index range however many experiments there are.
        Index("ix_experiments_team_id", "team", "id"),
        Index("ix_experiments_service_id", "service_id", "id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    service_id: Mapped[int] = mapped_column(ForeignKey("services.id"))
    kind: Mapped[str] = mapped_column(String(8))  # "ab" | "aa"
    team: Mapped[str] = mapped_column(String(200))
    phase: Mapped[str] = mapped_column(String(16), index=True)
    failure: Mapped[str | None] = mapped_column(Text, nullable=True)
    spec: Mapped[str] = mapped_column(Text)  # the resolved ExperimentConfig, JSON
    source_file: Mapped[str] = mapped_column(Text)
    artifacts_dir: Mapped[str] = mapped_column(Text)
    progress: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    updated_at: Mapped[float] = mapped_column(Float)
    lease_owner: Mapped[str | None] = mapped_column(String(200), nullable=True)
    lease_expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    claims: Mapped[int] = mapped_column(Integer, default=0)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    # The replay rate used: the experiment file's, or the one calibration found (with the
    # calibration's steps as JSON), so that every trial and the report use the same.
    rate_per_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    calibration: Mapped[str | None] = mapped_column(Text, nullable=True)
    # Higher goes first, among experiments waiting for hosts (then fairness between teams).
    priority: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # The region all of its hosts come from, chosen at its first allocation.
    region: Mapped[str | None] = mapped_column(String(100), nullable=True)
    # Who asked for it: "cli" from the command line, else the API token's name; what asked
    # for it: "" by hand, "schedule" for a periodic A/A run, "bisect" for a bisection step.
    submitted_by: Mapped[str] = mapped_column(String(200), default="cli", server_default="cli")
    origin: Mapped[str] = mapped_column(String(32), default="", server_default="")


class Arm(Base):
    __tablename__ = "arms"
    __table_args__ = (UniqueConstraint("experiment_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiments.id"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    position: Mapped[int] = mapped_column(Integer)
    source: Mapped[str] = mapped_column(Text)
    build_key: Mapped[str | None] = mapped_column(String(64), nullable=True)
    build_cached: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    artifact: Mapped[str | None] = mapped_column(Text, nullable=True)
    build_log: Mapped[str | None] = mapped_column(Text, nullable=True)


class Build(Base):
    """A cached build, by content key (tree hash, command, artifact, environment)."""

    __tablename__ = "builds"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    tree_hash: Mapped[str] = mapped_column(String(64))
    source: Mapped[str] = mapped_column(Text)
    command: Mapped[str | None] = mapped_column(Text, nullable=True)
    artifact: Mapped[str] = mapped_column(Text)
    log: Mapped[str | None] = mapped_column(Text, nullable=True)
    duration_s: Mapped[float] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)


class Trial(Base):
    """One trial's state. ``done`` trials have their observations file; a ``running`` trial
    whose experiment changes hands was interrupted and is run again from the start."""

    __tablename__ = "trials"
    __table_args__ = (UniqueConstraint("experiment_id", "index"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiments.id"), index=True)
    index: Mapped[int] = mapped_column(Integer)
    # pending | running | done | excluded (its batches were spoiled in every attempt) |
    # skipped (a sequential design settled before it was needed) | abandoned (the
    # experiment failed or was interrupted while it ran)
    state: Mapped[str] = mapped_column(String(16))
    note: Mapped[str | None] = mapped_column(Text, nullable=True)  # why excluded or skipped
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    observations: Mapped[str | None] = mapped_column(Text, nullable=True)
    processor: Mapped[str | None] = mapped_column(String(200), nullable=True)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class Host(Base):
    """A host of the inventory: locally, a CPU set of one machine; with the ``ray`` backend,
    a test machine that joined as a Ray worker node (``hairline agent start``).

    ``experiment_id`` marks an allocation; it lapses with ``lease_expires_at`` (renewed
    with the experiment's lease), so a dead processor cannot keep hosts forever. The facts
    that allocation matches on or prefers (region, server type, CPU arch, kernel, CPU model,
    turbo) are columns; all facts are also in ``facts`` (JSON). A host that died mid-trial
    is ``healthy = False`` until its agent registers it again.
    """

    __tablename__ = "hosts"
    __table_args__ = (
        Index("ix_hosts_class", "region", "server_type", "cpu_arch", "kernel"),
        Index("ix_hosts_team", "team"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    backend: Mapped[str] = mapped_column(String(32))
    machine: Mapped[str] = mapped_column(String(200))
    cpus: Mapped[str] = mapped_column(Text)  # "2,3"
    facts: Mapped[str] = mapped_column(Text)  # JSON
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    experiment_id: Mapped[int | None] = mapped_column(
        ForeignKey("experiments.id"), nullable=True, index=True
    )
    team: Mapped[str | None] = mapped_column(String(200), nullable=True)
    allocated_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    lease_expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    region: Mapped[str] = mapped_column(String(100), default="local", server_default="local")
    server_type: Mapped[str] = mapped_column(
        String(200), default="unknown", server_default="unknown"
    )
    cpu_arch: Mapped[str] = mapped_column(String(64), default="unknown", server_default="unknown")
    cpu_model: Mapped[str] = mapped_column(String(200), default="unknown", server_default="unknown")
    kernel: Mapped[str] = mapped_column(String(200), default="unknown", server_default="unknown")
    # "on" | "off" | "unknown": allocation prefers turbo off (ServiceLab section 4.1).
    turbo: Mapped[str] = mapped_column(String(16), default="unknown", server_default="unknown")
    healthy: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    health_note: Mapped[str | None] = mapped_column(Text, nullable=True)
    # Where its arms are reached: the Ray node's IP address (None for local CPU sets).
    address: Mapped[str | None] = mapped_column(String(200), nullable=True)
    last_seen_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class Quota(Base):
    """The most hosts a team may hold at once."""

    __tablename__ = "quotas"

    team: Mapped[str] = mapped_column(String(200), primary_key=True)
    max_hosts: Mapped[int] = mapped_column(Integer)


class RegionQuota(Base):
    """The most hosts a team may hold at once in one region (besides its overall quota)."""

    __tablename__ = "region_quotas"

    team: Mapped[str] = mapped_column(String(200), primary_key=True)
    region: Mapped[str] = mapped_column(String(100), primary_key=True)
    max_hosts: Mapped[int] = mapped_column(Integer)


class Run(Base):
    """Which arm ran on which host in which batch, with the host's facts at the time and
    the process group, so a processor that takes over can stop what a dead one left."""

    __tablename__ = "runs"
    # The concurrency guard (lab/concurrency.py) looks for other experiments' runs by time.
    __table_args__ = (Index("ix_runs_started_at", "started_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiments.id"), index=True)
    trial: Mapped[int] = mapped_column(Integer)
    batch: Mapped[int] = mapped_column(Integer)
    arm: Mapped[str] = mapped_column(String(100))
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id"))
    host_index: Mapped[int] = mapped_column(Integer)
    processor: Mapped[str] = mapped_column(String(200))
    pgid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    port: Mapped[int | None] = mapped_column(Integer, nullable=True)
    facts: Mapped[str] = mapped_column(Text)  # JSON
    started_at: Mapped[float] = mapped_column(Float)
    stopped_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class VerdictRow(Base):
    __tablename__ = "verdicts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiments.id"), index=True)
    metric: Mapped[str] = mapped_column(String(200))
    candidate: Mapped[str] = mapped_column(String(100))
    # The arm the candidate was compared with (None: rows written before there was a choice)
    # and whether the comparison decides the outcome (context comparisons do not).
    baseline: Mapped[str | None] = mapped_column(String(100), nullable=True)
    deciding: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    label: Mapped[str] = mapped_column(String(16))
    model: Mapped[str] = mapped_column(String(100))
    model_reason: Mapped[str] = mapped_column(Text)
    relative_effect: Mapped[float | None] = mapped_column(Float, nullable=True)
    absolute_effect: Mapped[float | None] = mapped_column(Float, nullable=True)
    ci_low: Mapped[float | None] = mapped_column(Float, nullable=True)
    ci_high: Mapped[float | None] = mapped_column(Float, nullable=True)
    p_value: Mapped[float | None] = mapped_column(Float, nullable=True)
    threshold: Mapped[str] = mapped_column(String(32))
    direction: Mapped[str] = mapped_column(String(32))


class ApiToken(Base):
    """An API token: only its SHA-256 is stored (tokens are 32 random bytes, so a fast hash
    is safe; a slow one would only slow every request). ``scope`` is read < submit < admin;
    a token sees and acts on its own team's experiments only, unless it is an admin's."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    team: Mapped[str] = mapped_column(String(200))
    scope: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[float] = mapped_column(Float)
    last_used_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class RegisteredCommand(Base):
    """A build or start command an admin allowed for a service: a service file submitted
    over the API may name only these, so nothing from the API reaches a shell unvetted."""

    __tablename__ = "registered_commands"
    __table_args__ = (UniqueConstraint("service", "kind", "command"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    service: Mapped[str] = mapped_column(String(200), index=True)
    kind: Mapped[str] = mapped_column(String(16))  # "build" | "start"
    command: Mapped[str] = mapped_column(Text)
    registered_by: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[float] = mapped_column(Float)


class Triage(Base):
    """A regression someone acknowledged or chose to ignore (none: it is open). The history
    of every change is in ``audit_log``."""

    __tablename__ = "triage"
    __table_args__ = (UniqueConstraint("experiment_id", "metric", "candidate"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiments.id"), index=True)
    metric: Mapped[str] = mapped_column(String(200))
    candidate: Mapped[str] = mapped_column(String(100))
    state: Mapped[str] = mapped_column(String(16))  # "acknowledged" | "ignored"
    actor: Mapped[str] = mapped_column(String(200))
    note: Mapped[str] = mapped_column(Text, default="")
    at: Mapped[float] = mapped_column(Float)


class AuditEntry(Base):
    """Who did what to which object, append-only: token changes, submissions, cancels,
    triage, registered commands."""

    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[float] = mapped_column(Float, index=True)
    actor: Mapped[str] = mapped_column(String(200))
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(200))
    detail: Mapped[str] = mapped_column(Text, default="")


class AaSchedule(Base):
    """A periodic A/A run of an experiment file whose service asks for one (``[aa] every``)."""

    __tablename__ = "aa_schedules"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    experiment_file: Mapped[str] = mapped_column(Text, unique=True)
    service: Mapped[str] = mapped_column(String(200), index=True)
    team: Mapped[str] = mapped_column(String(200))
    every_s: Mapped[float] = mapped_column(Float)
    next_at: Mapped[float] = mapped_column(Float)
    last_experiment_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    created_at: Mapped[float] = mapped_column(Float)


class TuningRun(Base):
    """A ``hairline tune`` run (docs/tuning.md): the tuning file as read (``spec``, JSON),
    where it stands, and, with test and control clusters, their hosts and the A/A that
    cleared them. The searchers are pure functions of the evaluations, so these rows are all
    a resumed run needs."""

    __tablename__ = "tuning_runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    service: Mapped[str] = mapped_column(String(200), index=True)
    team: Mapped[str] = mapped_column(String(200))
    searcher: Mapped[str] = mapped_column(String(32))
    spec: Mapped[str] = mapped_column(Text)
    source_file: Mapped[str] = mapped_column(Text)
    # running, done, failed (an error stopped it: resumable), refused (the clusters' A/A)
    state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    clusters: Mapped[str] = mapped_column(Text, default="")
    aa_experiment_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # The process driving it and when it last said so: a second driver refuses to resume a
    # run whose driver is alive.
    driver: Mapped[str] = mapped_column(String(200), default="")
    heartbeat_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class TuningEvaluation(Base):
    """One candidate configuration of a tuning run and what its A/B found.

    ``status``: proposed (written before its experiment is queued, so a crash between the two
    loses nothing; also a candidate whose arm failed fewer than ``infeasible_after_failures``
    times, queued again), running (its experiment is queued or running), interrupted (the
    run stopped while its experiment was queued or running: ``--resume`` takes it up), done,
    infeasible (the candidate's own arm failed repeatedly, or it broke a constraint: never
    proposed again), failed (the experiment failed for a reason not the candidate's).
    ``value`` is the searcher's observation (higher is better) and ``se`` its standard
    error; ``candidate_failures`` the experiments in which the candidate's arm alone
    failed."""

    __tablename__ = "tuning_evaluations"
    __table_args__ = (UniqueConstraint("run_id", "position"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("tuning_runs.id"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    batch: Mapped[int] = mapped_column(Integer)
    config: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    experiment_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    arm: Mapped[str] = mapped_column(String(100), default="")
    value: Mapped[float | None] = mapped_column(Float, nullable=True)
    se: Mapped[float | None] = mapped_column(Float, nullable=True)
    effect_rel: Mapped[float | None] = mapped_column(Float, nullable=True)
    ci_low: Mapped[float | None] = mapped_column(Float, nullable=True)
    ci_high: Mapped[float | None] = mapped_column(Float, nullable=True)
    mean_control: Mapped[float | None] = mapped_column(Float, nullable=True)
    mean_candidate: Mapped[float | None] = mapped_column(Float, nullable=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    candidate_failures: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class LabEvent(Base):
    """Something besides experiments that happened to a service, a downstream (``host:port``)
    or a host: a deployment, maintenance. Experiments whose trials it overlapped warn about
    it (lab/concurrency.py, ServiceLab section 6.2.4). ``ended_at`` None: a point in time."""

    __tablename__ = "lab_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))  # "deploy" | "maintenance" | "other"
    service: Mapped[str] = mapped_column(String(200))
    host: Mapped[str | None] = mapped_column(String(200), nullable=True)
    started_at: Mapped[float] = mapped_column(Float, index=True)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    note: Mapped[str] = mapped_column(Text, default="", server_default="")
    created_by: Mapped[str] = mapped_column(String(200))
