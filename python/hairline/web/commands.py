"""The commands an admin registered per service: the only start and build commands a
service file submitted over the HTTP API may name.

A command is kept as the exact text of the service file's ``start`` (or ``[service.build]
command``), placeholders unfilled, and matched exactly: the API never runs what an admin
has not seen word for word.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import select

from hairline.errors import HairlineError
from hairline.store.db import Store
from hairline.store.models import AuditEntry, RegisteredCommand

__all__ = ["COMMAND_KINDS", "Registered", "list_commands", "register_command", "registered_set"]

COMMAND_KINDS = ("start", "build")


@dataclass(frozen=True)
class Registered:
    """One registered command of a service."""

    service: str
    kind: str  # "start" | "build"
    command: str
    registered_by: str
    created_at: float


def register_command(
    store: Store, *, service: str, kind: str, command: str, actor: str,
    clock: Callable[[], float] = time.time,
) -> bool:  # fmt: skip
    """Register ``command`` for ``service``; False when it was registered already."""
    if kind not in COMMAND_KINDS:
        raise HairlineError(
            f"unknown command kind {kind!r}", hint=f"use one of {', '.join(COMMAND_KINDS)}"
        )
    if not service.strip():
        raise HairlineError("a registered command needs a service name", hint="name the service")
    if not command.strip():
        raise HairlineError(
            f"the {kind} command of {service!r} is empty",
            hint=f"pass the service file's exact {kind} command, e.g. --{kind} '...'",
        )
    now = clock()
    with store.transaction() as session:
        known = session.scalar(
            select(RegisteredCommand.id).where(
                RegisteredCommand.service == service,
                RegisteredCommand.kind == kind,
                RegisteredCommand.command == command,
            )
        )
        if known is not None:
            return False
        session.add(RegisteredCommand(service=service, kind=kind, command=command,
                                      registered_by=actor, created_at=now))  # fmt: skip
        session.add(AuditEntry(at=now, actor=actor, action="command.register", target=service,
                               detail=f"{kind}: {command}"))  # fmt: skip
    return True


def list_commands(store: Store, service: str | None = None) -> list[Registered]:
    """The registered commands, of one service or of all, in the order registered."""
    query = select(RegisteredCommand).order_by(RegisteredCommand.id)
    if service is not None:
        query = query.where(RegisteredCommand.service == service)
    with store.transaction() as session:
        return [
            Registered(service=r.service, kind=r.kind, command=r.command,
                       registered_by=r.registered_by, created_at=r.created_at)
            for r in session.scalars(query)
        ]  # fmt: skip


def registered_set(store: Store, service: str) -> frozenset[tuple[str, str]]:
    """``(kind, command)`` of every command registered for ``service``."""
    return frozenset((r.kind, r.command) for r in list_commands(store, service))
