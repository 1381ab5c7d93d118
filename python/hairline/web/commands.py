"""The commands an admin registered per service: the only start and build commands a
service file submitted over the HTTP API may name, and the environment keys its
submissions may set beyond the default allowlist (web/submit.py's ``DEFAULT_ENV``).

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
from hairline.web.submit import env_key_refused

__all__ = ["COMMAND_KINDS", "Registered", "list_commands", "register_command", "registered_set"]

# "env": the "command" is an environment key submissions of the service may set.
COMMAND_KINDS = ("start", "build", "env")


@dataclass(frozen=True)
class Registered:
    """One registered command of a service."""

    service: str
    kind: str  # "start" | "build" | "env"
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
    if kind == "env" and env_key_refused(command):
        raise HairlineError(
            f"{command!r} cannot be allowed: it chooses which program runs or what it loads "
            "(or is not an environment key)",
            hint="allow keys that tune the service, e.g. --env WORKERS; a different program "
            "or library is a different registered start command",
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
