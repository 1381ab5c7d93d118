"""API tokens: made, checked and revoked; who a request is and what it may do.

A token is ``hl_`` and 32 random bytes (URL-safe base64); the database keeps its SHA-256
alone. Scopes are ordered: ``read`` sees experiments, ``submit`` also submits and cancels
them, ``admin`` also registers services' commands and sees every team. A read or submit
token sees its own team's experiments only.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import select, update
from typing_extensions import TypedDict

from hairline.errors import HairlineError
from hairline.kit.jsonout import documented
from hairline.store.db import Store
from hairline.store.models import ApiToken, AuditEntry

__all__ = [
    "SCOPES",
    "Principal",
    "TokenJson",
    "audit",
    "create_token",
    "hash_token",
    "list_tokens",
    "principal_for",
    "revoke_token",
]

# Each scope can do what those before it can. "triage" acknowledges and ignores regressions:
# a token that may only submit cannot talk its own experiment's gate past a regression.
SCOPES = ("read", "submit", "triage", "admin")
TOKEN_PREFIX = "hl_"
# last_used_at is written at most this often per token: a write per request would make
# every read of the dashboard a write transaction.
_LAST_USED_EVERY_S = 60.0


@dataclass(frozen=True)
class Principal:
    """Who made a request: the token's name, its team and its scope."""

    name: str
    team: str
    scope: str

    def can(self, scope: str) -> bool:
        return SCOPES.index(self.scope) >= SCOPES.index(scope)

    @property
    def admin(self) -> bool:
        return self.scope == "admin"

    def sees(self, team: str) -> bool:
        return self.admin or team == self.team


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(
    store: Store, *, name: str, team: str, scope: str, clock: Callable[[], float] = time.time
) -> str:
    """A new token (returned once, in clear; only its hash is kept)."""
    if scope not in SCOPES:
        raise HairlineError(f"unknown scope {scope!r}", hint=f"use one of {', '.join(SCOPES)}")
    if not team.strip():
        raise HairlineError("a token needs a team", hint="pass --team NAME")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    now = clock()
    with store.transaction() as session:
        if session.scalar(select(ApiToken.id).where(ApiToken.name == name)) is not None:
            raise HairlineError(
                f"a token named {name!r} exists already",
                hint="choose another --name, or revoke it first with `hairline token revoke`",
            )
        session.add(
            ApiToken(name=name, token_hash=hash_token(token), team=team, scope=scope,
                     created_at=now)
        )  # fmt: skip
        session.add(
            AuditEntry(at=now, actor="cli", action="token.create", target=name,
                       detail=f"team={team} scope={scope}")
        )  # fmt: skip
    return token


def revoke_token(store: Store, name: str, *, clock: Callable[[], float] = time.time) -> None:
    now = clock()
    with store.transaction() as session:
        row = session.scalar(select(ApiToken).where(ApiToken.name == name))
        if row is None or row.revoked_at is not None:
            raise HairlineError(
                f"no live token named {name!r}", hint="`hairline token list` shows them"
            )
        row.revoked_at = now
        session.add(AuditEntry(at=now, actor="cli", action="token.revoke", target=name))


@documented
class TokenJson(TypedDict):
    """An API token as ``hairline token list --json`` lists it (never the token itself)."""

    name: str
    team: str
    scope: str
    """read, submit, triage or admin."""
    created_at: float
    """Unix seconds."""
    last_used_at: float | None
    """Unix seconds; null: never used."""
    revoked: bool


def list_tokens(store: Store) -> list[TokenJson]:
    with store.transaction() as session:
        rows = session.scalars(select(ApiToken).order_by(ApiToken.id)).all()
        return [
            {"name": r.name, "team": r.team, "scope": r.scope, "created_at": r.created_at,
             "last_used_at": r.last_used_at, "revoked": r.revoked_at is not None}
            for r in rows
        ]  # fmt: skip


def principal_for(
    store: Store, token: str | None, *, clock: Callable[[], float] = time.time
) -> Principal | None:
    """The live token's principal, or None for a missing, unknown or revoked token."""
    if not token or not token.startswith(TOKEN_PREFIX):
        return None
    digest = hash_token(token)
    with store.autocommit() as connection:
        row = connection.execute(
            select(ApiToken.name, ApiToken.team, ApiToken.scope, ApiToken.last_used_at).where(
                ApiToken.token_hash == digest, ApiToken.revoked_at.is_(None)
            )
        ).first()
        if row is None:
            return None
        now = clock()
        if row.last_used_at is None or now - row.last_used_at > _LAST_USED_EVERY_S:
            connection.execute(
                update(ApiToken).where(ApiToken.token_hash == digest).values(last_used_at=now)
            )
    return Principal(name=row.name, team=row.team, scope=row.scope)


def audit(
    store: Store, actor: str, action: str, target: str, detail: str = "",
    *, clock: Callable[[], float] = time.time,
) -> None:  # fmt: skip
    with store.transaction() as session:
        session.add(AuditEntry(at=clock(), actor=actor, action=action, target=target,
                               detail=detail))  # fmt: skip
