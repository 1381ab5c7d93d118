"""The durable queue: experiments are rows, processors claim them with leases.

A processor *claims* an experiment in an active phase whose lease is empty or expired,
writing its own id and an expiry; it *renews* the lease while it works and *releases* it
when the experiment ends or must wait. Every write that moves an experiment is conditional
on the writer still holding the lease, so a processor that lost its lease (it stalled, or
was presumed dead) cannot overwrite the work of the one that took over.

Which experiment is claimed next: the highest priority first, then, among teams, the one
furthest below its quota share, then the oldest (``hosts/fairness.py`` decides the order
from the claimable experiments grouped by priority and team, and the hosts each team
holds). The claim is a compare-and-set ``UPDATE ... WHERE lease is free RETURNING id``; on
PostgreSQL its candidate row is selected ``FOR UPDATE SKIP LOCKED`` in the same statement,
so that concurrent processors do not queue on one row but pass to the next team. A team
that a processor is giving hosts to is passed over until that allocation ends: a second
allocation of the team would wait for the first's quota lock.
The same statements run on SQLite, where the database's single writer gives the same
guarantee.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from sqlalchemy import (
    Table,
    and_,
    bindparam,
    func,
    literal_column,
    null,
    or_,
    select,
    union_all,
    update,
)
from sqlalchemy.orm import Session

from hairline.config import ExperimentConfig
from hairline.errors import Cancelled, HairlineError, LeaseLost
from hairline.hosts.fairness import Waiter, claim_order
from hairline.hosts.inventory import release_hosts
from hairline.hosts.quotas import CLAIMED_AND_QUOTAS_PARTS, team_usage
from hairline.hosts.rows import RELEASE
from hairline.hosts.rows import release as release_rows
from hairline.store.db import Store
from hairline.store.models import (
    ACTIVE_PHASES,
    TERMINAL_PHASES,
    Arm,
    Experiment,
    Host,
    Service,
    Trial,
)

__all__ = [
    "Cancelled",
    "Clock",
    "LeaseKeeper",
    "LeaseLost",
    "claim",
    "enqueue",
    "new_owner",
    "release",
    "renew",
    "request_cancel",
    "require_experiment",
    "transition",
]

Clock = Callable[[], float]


def require_experiment(session: Session, store: Store, experiment_id: int) -> Experiment:
    """The experiment's row, or the user error that names the database and how to list."""
    row = session.get(Experiment, experiment_id)
    if row is None:
        raise HairlineError(
            f"no experiment {experiment_id} in {store.shown_url}",
            hint="`hairline status` lists the experiments",
        )
    return row


def request_cancel(store: Store, experiment_id: int, *, clock: Clock = time.time) -> str:
    """Cancel an experiment: at once if no processor holds it ("cancelled"), else ask its
    processor to stop at the next safe point, between batches ("requested")."""
    now = clock()
    with store.transaction() as session:
        row = require_experiment(session, store, experiment_id)
        if row.phase in TERMINAL_PHASES:
            raise HairlineError(
                f"experiment {experiment_id} has already ended ({row.phase})",
                hint="only queued or running experiments can be cancelled",
            )
        held = row.lease_owner is not None and (row.lease_expires_at or 0) > now
        row.cancel_requested = True
        if held:
            return "requested"
        row.phase = "cancelled"
        row.finished_at = now
        row.updated_at = now
        row.progress = "cancelled"
    release_hosts(store, experiment_id)
    return "cancelled"


def _cancel_requested(store: Store, experiment_id: int) -> bool:
    with store.transaction() as session:
        row = session.get(Experiment, experiment_id)
        return bool(row is not None and row.cancel_requested)


def new_owner(prefix: str = "processor") -> str:
    """A processor id, unique across machines and restarts."""
    import os
    import socket

    return f"{prefix}:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def enqueue(
    store: Store,
    config: ExperimentConfig,
    *,
    kind: str = "ab",
    submitted_by: str = "cli",
    origin: str = "",
    priority: int | None = None,
    clock: Clock = time.time,
) -> int:
    """Add an experiment to the queue (phase ``queued``) with its arms and trials.

    ``priority`` overrides the file's (periodic A/A runs go in below everything else)."""
    now = clock()
    with store.transaction() as session:
        service = session.scalar(select(Service).where(Service.name == config.service.name))
        if service is None:
            service = Service(name=config.service.name, created_at=now)
            session.add(service)
            session.flush()
        experiment = Experiment(
            service_id=service.id,
            kind=kind,
            team=config.team,
            priority=config.priority if priority is None else priority,
            phase="queued",
            submitted_by=submitted_by,
            origin=origin,
            spec=config.model_dump_json(),
            source_file=config.source,
            artifacts_dir="",
            progress="queued",
            created_at=now,
            updated_at=now,
            claims=0,
            cancel_requested=False,
        )
        session.add(experiment)
        session.flush()
        experiment.artifacts_dir = str(store.home / "experiments" / str(experiment.id))
        baseline = config.baseline_arm
        names = [baseline, *(n for n in config.arms if n != baseline)]
        for position, name in enumerate(names):
            arm = config.arms[name]
            if arm.git is not None:
                source = f"git {arm.git} of {arm.repo}"
            elif arm.path is not None:
                source = f"path {arm.path}"
            else:
                source = "the service's start command"
            extra = " ".join([*arm.args, *(f"{k}={v}" for k, v in arm.env.items())])
            if extra:
                source += f" with {extra}"
            if kind == "aa" and position > 0:
                source = f"same as {baseline}"
            session.add(
                Arm(experiment_id=experiment.id, name=name, position=position, source=source)
            )
        for index in range(config.design.planned_trials):
            session.add(
                Trial(experiment_id=experiment.id, index=index, state="pending", attempts=0)
            )
        Path(experiment.artifacts_dir).mkdir(parents=True, exist_ok=True)
        return experiment.id


# The claim's statements, built once: a processor runs them every poll.
_EXPERIMENTS = cast(Table, Experiment.__table__)
_E = _EXPERIMENTS.c
_LEASE_FREE = or_(_E.lease_expires_at.is_(None), _E.lease_expires_at < bindparam("now"))
_CLAIMABLE = and_(
    _E.phase.in_(ACTIVE_PHASES), _LEASE_FREE, _E.id.not_in(bindparam("skip", expanding=True))
)
# The claimable experiments by (priority, team), with what fairness needs (experiments
# on their way to hosts, quotas: ``hosts/quotas.py``) in the same round trip, as
# (kind, team, n, oldest) rows: kind "waiting" with n the priority, or the usage rows.
_WAITING_AND_USAGE = union_all(
    select(literal_column("'waiting'").label("kind"), _E.team, _E.priority.label("n"),
           func.min(_E.created_at).label("oldest"))
    .where(_CLAIMABLE)
    .group_by(_E.priority, _E.team),
    *(part.add_columns(null().label("oldest"))
      for part in CLAIMED_AND_QUOTAS_PARTS),
)  # fmt: skip
_TAKE = update(_EXPERIMENTS).values(
    lease_owner=bindparam("owner"), lease_expires_at=bindparam("until"),
    claims=_E.claims + 1, updated_at=bindparam("now"),
)  # fmt: skip
# Another experiment of the team is being given hosts now: its processor holds the team's
# quota lock, and a second allocation of the team would only wait for it.
_OTHERS = _EXPERIMENTS.alias("others")
_TEAM_ALLOCATING = (
    select(_OTHERS.c.id)
    .where(_OTHERS.c.team == bindparam("t"), _OTHERS.c.phase == "allocating",
           _OTHERS.c.lease_expires_at >= bindparam("now"))
    .exists()
)  # fmt: skip
# The oldest claimable experiment of one team at one priority, taken in one statement,
# unless the team is allocating already. On PostgreSQL, when another processor is taking
# that one (its row is locked), the team is passed over (SKIP LOCKED on the oldest alone),
# neither waited for nor served twice at once by taking its next experiment.
_OLDEST_OF = (
    select(_E.id)
    .where(_CLAIMABLE, _E.priority == bindparam("p"), _E.team == bindparam("t"),
           ~_TEAM_ALLOCATING)
    .order_by(_E.created_at, _E.id)
    .limit(1)
    .scalar_subquery()
)  # fmt: skip
_NEXT_OF = select(_E.id).where(_E.id == _OLDEST_OF).with_for_update(skip_locked=True)
_TAKE_NEXT = _TAKE.where(_E.id == _NEXT_OF.scalar_subquery(), _LEASE_FREE).returning(_E.id)
_TAKE_THIS = _TAKE.where(_E.id == bindparam("e_id"), _CLAIMABLE).returning(_E.id)


def claim(
    store: Store,
    owner: str,
    *,
    lease_s: float,
    clock: Clock = time.time,
    experiment_id: int | None = None,
    skip: Collection[int] = (),
) -> int | None:
    """Claim the next claimable experiment in the claim order (or ``experiment_id``),
    passing over those in ``skip``; its id, or None.

    A processor whose experiment must wait for hosts passes it in ``skip`` on its next
    claims, so that the experiments behind it may try for hosts meanwhile.

    No transaction is needed: the order is read first, and each take is one conditional
    ``UPDATE ... RETURNING`` that either takes a free lease or changes nothing.
    """
    now = clock()
    params: dict[str, object] = {
        "now": now, "skip": list(skip), "owner": owner, "until": now + lease_s,
    }  # fmt: skip
    with store.autocommit() as connection:
        if experiment_id is not None:
            found = connection.execute(_TAKE_THIS, {**params, "e_id": experiment_id}).scalar()
            return None if found is None else int(found)
        waiters: list[Waiter] = []
        usage_rows: list[tuple[str, str, int]] = []
        for kind, team, n, oldest in connection.execute(_WAITING_AND_USAGE, params).all():
            if kind == "waiting":
                waiters.append(Waiter(team=team, priority=int(n), oldest_at=float(oldest)))
            else:
                usage_rows.append((kind, team, int(n)))
        if not waiters:
            return None
        usage = team_usage(store, connection, now, teams={w.team for w in waiters},
                           claimed_and_quotas=usage_rows)  # fmt: skip
        order = claim_order(
            waiters, held=usage.held, quotas=usage.quotas, pool=usage.pool,
            allocating=usage.allocating,
        )  # fmt: skip
        for waiter in order:
            found = connection.execute(
                _TAKE_NEXT, {**params, "p": waiter.priority, "t": waiter.team}
            ).scalar()
            if found is not None:
                return int(found)
    return None


_MOVE = update(_EXPERIMENTS).where(
    _E.id == bindparam("e_id"),
    _E.lease_owner == bindparam("owner"),
    _E.lease_expires_at >= bindparam("now"),
)
# On PostgreSQL the hosts go back in the move's own statement (a data-modifying CTE), one
# round trip fewer at the end of every experiment. Unconditional: a move that finds the
# lease lost raises LeaseLost, which rolls the transaction back, the release with it.
_MOVE_RELEASING = _MOVE.add_cte(RELEASE.cte("released"))


def _held(experiment_id: int, owner: str, now: float) -> object:
    return and_(
        Experiment.id == experiment_id,
        Experiment.lease_owner == owner,
        Experiment.lease_expires_at >= now,
    )


def renew(
    store: Store, owner: str, experiment_id: int, *, lease_s: float, clock: Clock = time.time
) -> bool:
    """Extend the lease (and the experiment's host allocations); False if it was lost."""
    now = clock()
    with store.transaction() as session:
        result = session.execute(
            update(Experiment)
            .where(_held(experiment_id, owner, now))  # type: ignore[arg-type]
            .values(lease_expires_at=now + lease_s)
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            return False
        session.execute(
            update(Host)
            .where(Host.experiment_id == experiment_id)
            .values(lease_expires_at=now + lease_s)
        )
        return True


def release(store: Store, owner: str, experiment_id: int) -> None:
    """Give the lease up (the experiment ended, or waits for something)."""
    with store.transaction() as session:
        session.execute(
            update(Experiment)
            .where(Experiment.id == experiment_id, Experiment.lease_owner == owner)
            .values(lease_owner=None, lease_expires_at=None)
        )


def transition(
    session: Session,
    owner: str,
    experiment_id: int,
    *,
    clock: Clock = time.time,
    give_hosts_back: bool = False,
    **values: object,
) -> None:
    """Update the experiment in ``session``'s transaction, if ``owner`` still holds it,
    and with ``give_hosts_back`` release its hosts in the same transaction.

    Raises :class:`LeaseLost` otherwise, which rolls the whole transaction back.
    """
    now = clock()
    # The SET clause comes from the parameters (a Core statement built once: the ORM's
    # bulk update cost more Python time than the database spent on it).
    params = {**values, "updated_at": now, "e_id": experiment_id, "owner": owner, "now": now}
    connection = session.connection()
    releasing = give_hosts_back and connection.dialect.name == "postgresql"
    result = connection.execute(_MOVE_RELEASING if releasing else _MOVE, params)
    if result.rowcount != 1:
        raise LeaseLost(
            f"experiment {experiment_id}: lease lost; another processor has taken it over "
            "(this one stalled longer than the lease: raise --lease-s if that was expected)"
        )
    if give_hosts_back and not releasing:
        release_rows(connection, experiment_id)


class LeaseKeeper:
    """Renews a lease every third of its length on a thread, until stopped.

    ``check()`` raises :class:`LeaseLost` once a renewal has failed; the processor calls it
    between steps, so work stops soon after the lease is gone.
    """

    def __init__(
        self,
        store: Store,
        owner: str,
        experiment_id: int,
        *,
        lease_s: float,
        clock: Clock = time.time,
    ) -> None:
        self._args = (store, owner, experiment_id)
        self._lease_s = lease_s
        self._clock = clock
        self._stop = threading.Event()
        self.lost = threading.Event()
        self.cancelled = threading.Event()
        if _cancel_requested(store, experiment_id):
            self.cancelled.set()
        self._thread = threading.Thread(target=self._run, name="lease", daemon=True)

    def _run(self) -> None:
        store, owner, experiment_id = self._args
        while not self._stop.wait(self._lease_s / 3):
            try:
                ok = renew(store, owner, experiment_id, lease_s=self._lease_s, clock=self._clock)
            except Exception:  # a database hiccup: try again at the next tick
                continue
            if not ok:
                self.lost.set()
                return
            with contextlib.suppress(Exception):
                if _cancel_requested(store, experiment_id):
                    self.cancelled.set()

    def check(self) -> None:
        """Raise :class:`LeaseLost` once the lease is gone, :class:`Cancelled` once a
        cancel was asked for."""
        _, _, experiment_id = self._args
        if self.lost.is_set():
            raise LeaseLost(f"experiment {experiment_id}: lease lost")
        if self.cancelled.is_set():
            raise Cancelled(f"experiment {experiment_id}: cancelled")

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass(frozen=True)
class ExperimentRow:
    """What a processor needs of an experiment row, read once per claim."""

    id: int
    kind: str
    team: str
    phase: str
    config: ExperimentConfig
    artifacts_dir: Path
    cancel_requested: bool
    # "api" for a submission through the API: its build runs sandboxed (lab/build/sandbox.py).
    origin: str = ""


def load(session: Session, experiment_id: int) -> ExperimentRow:
    row = session.get(Experiment, experiment_id)
    if row is None:
        raise HairlineError(f"no experiment {experiment_id}", hint="see `hairline status`")
    return ExperimentRow(
        id=row.id,
        kind=row.kind,
        team=row.team,
        phase=row.phase,
        config=ExperimentConfig.model_validate(json.loads(row.spec)),
        artifacts_dir=Path(row.artifacts_dir),
        cancel_requested=row.cancel_requested,
        origin=row.origin,
    )
