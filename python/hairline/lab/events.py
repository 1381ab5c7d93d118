"""Events beside experiments: deployments and maintenance of a service, a downstream or a
host, recorded so that an experiment they overlapped warns about them (lab/concurrency.py;
ServiceLab section 6.2.4: the top cause of false positives). Experiments need no event:
their runs are in the store already."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select

from hairline.errors import ConfigError
from hairline.kit.durations import duration_s
from hairline.kit.jsonout import documented
from hairline.store.db import Store
from hairline.store.models import LabEvent

__all__ = [
    "EVENT_KINDS",
    "TIME_FORMATS",
    "RecordedEvent",
    "add_event",
    "list_events",
    "parse_time",
    "recorded_event",
]

EVENT_KINDS = ("deploy", "maintenance", "other")
TIME_FORMATS = (
    'ISO 8601 (2024-05-01T12:30:00+00:00; without a zone, local time), "now", '
    'or an offset from now such as "-15m", "-2h", "+30s"'
)


@documented
@dataclass(frozen=True)
class RecordedEvent:
    """A deployment, maintenance or other event (``hairline lab event list --json`` lists
    them)."""

    id: int
    kind: str
    """deploy, maintenance or other."""
    service: str
    """The service or downstream (host:port) it touched."""
    host: str | None
    """The host (or machine) it touched, if one."""
    started_at: float
    """Unix seconds."""
    ended_at: float | None
    """Unix seconds; null: a point in time."""
    note: str
    created_by: str
    """Who recorded it: the API token's name, or "cli"."""


def parse_time(text: str, *, now_s: float, flag: str = "--at") -> float:
    """``text`` as Unix seconds: ISO 8601 (local time when it names no zone), ``now``, or
    an offset from ``now_s`` such as ``-15m``; a ConfigError naming ``flag`` otherwise."""
    value = text.strip()
    if value.lower() == "now":
        return now_s
    sign, rest = value[:1], value[1:]
    offset_s = duration_s(rest, units=("s", "m", "h", "d")) if sign in ("-", "+") else None
    if offset_s is not None:
        return now_s - offset_s if sign == "-" else now_s + offset_s
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ConfigError(
            f"{flag} {text!r} is not a time", hint=f"write {flag} as {TIME_FORMATS}"
        ) from None
    return moment.timestamp()  # a naive datetime is taken as local time


def recorded_event(e: LabEvent) -> RecordedEvent:
    """A stored event as a plain value."""
    return RecordedEvent(
        id=e.id, kind=e.kind, service=e.service, host=e.host, started_at=e.started_at,
        ended_at=e.ended_at, note=e.note, created_by=e.created_by,
    )  # fmt: skip


def add_event(
    store: Store,
    kind: str,
    *,
    service: str,
    started_at: float,
    ended_at: float | None = None,
    host: str | None = None,
    note: str = "",
    created_by: str = "cli",
) -> RecordedEvent:
    """Record an event; ConfigError naming the field when it makes no sense."""
    problems: list[str] = []
    if kind not in EVENT_KINDS:
        problems.append(f"kind {kind!r} is not one of {', '.join(EVENT_KINDS)}")
    if not service.strip():
        problems.append("service is empty: name the service or downstream (host:port) it touched")
    if host is not None and not host.strip():
        problems.append("host is empty: name the host, or leave it out")
    if ended_at is not None and ended_at < started_at:
        problems.append("it ends (--until) before it starts (--at)")
    if problems:
        raise ConfigError(
            "the event is not valid: " + "; ".join(problems),
            hint="hairline lab event add deploy|maintenance|other --service S [--host H] "
            "[--at TIME] [--until TIME] [--note TEXT]",
        )
    with store.transaction() as session:
        row = LabEvent(
            kind=kind, service=service.strip(), host=host.strip() if host else None,
            started_at=started_at, ended_at=ended_at, note=note, created_by=created_by,
        )  # fmt: skip
        session.add(row)
        session.flush()
        return recorded_event(row)


def list_events(
    store: Store, *, since_s: float | None = None, limit: int = 200
) -> list[RecordedEvent]:
    """Events newest first (by start), those still going or ending at or after ``since_s``."""
    query = select(LabEvent).order_by(LabEvent.started_at.desc(), LabEvent.id.desc())
    if since_s is not None:
        query = query.where(
            (LabEvent.ended_at >= since_s)
            | (LabEvent.ended_at.is_(None) & (LabEvent.started_at >= since_s))
        )
    with store.transaction() as session:
        return [recorded_event(e) for e in session.scalars(query.limit(limit))]
