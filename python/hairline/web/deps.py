"""FastAPI dependencies shared by the API and the pages: the store, who is asking, and
whether they may. Without a valid token every route but ``/healthz`` and the login page
answers 401."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import HTTPException, Request, status

from hairline.store.db import Store
from hairline.web.auth import Principal, principal_for

__all__ = [
    "COOKIE",
    "DOCS_PATH",
    "OPENAPI_PATH",
    "TOKEN_REQUIRED",
    "principal",
    "request_token",
    "require",
    "store_of",
]

# The pages' browser session: the token itself, in an HttpOnly cookie set by /login.
COOKIE = "hairline_token"
# The API's own documents; a browser without a token gets the login page for the docs.
DOCS_PATH = "/api/v1/docs"
OPENAPI_PATH = "/api/v1/openapi.json"


def store_of(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


TOKEN_REQUIRED = (
    "a valid API token is required: send 'Authorization: Bearer TOKEN' "
    "(make one with `hairline token create --team T --scope read`)"
)


def request_token(request: Request) -> str | None:
    """The token a request carries: its bearer header, else the pages' cookie."""
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.cookies.get(COOKIE)


def principal(request: Request) -> Principal:
    """The request's principal; 401 when it has no live token."""
    who = principal_for(store_of(request), request_token(request))
    if who is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            detail=TOKEN_REQUIRED,
            headers={"WWW-Authenticate": "Bearer"},
        )
    return who


def require(scope: str) -> Callable[[Request], Principal]:
    """A dependency: the principal, if its scope reaches ``scope``; else 403."""

    def check(request: Request) -> Principal:
        who = principal(request)
        if not who.can(scope):
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                detail=f"token {who.name!r} has scope {who.scope!r}; this needs {scope!r}",
            )
        return who

    return check
