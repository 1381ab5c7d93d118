"""The dashboard's pages, rendered on the server: the login page and the browser's 401,
and the routers of the experiment pages (views_experiments), the service and A/A health
pages (views_trends) and the regressions page (views_regressions).

A browser signs in by pasting a token into /login, which keeps it in the HttpOnly cookie
``deps.COOKIE`` (SameSite=Lax: another site's form cannot post with it). A page asked for
without a valid token answers 401 with the login form; the API's 401 stays JSON.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import FastAPI, Form, Request, status
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from hairline.web import views_experiments, views_regressions, views_trends
from hairline.web.auth import principal_for
from hairline.web.deps import COOKIE, DOCS_PATH, store_of
from hairline.web.metrics import METRICS_PATH
from hairline.web.templating import page

__all__ = ["install", "safe_next"]

# A week: a browser session lasts as long as its token is live, but not forever.
_COOKIE_MAX_AGE_S = 7 * 24 * 3600
_PAGE_ERRORS = {403: "Not allowed", 404: "Not found"}


def safe_next(target: str | None) -> str:
    """Where to go after signing in: a path of this site only (never ``//host`` or a URL,
    which would make the login page an open redirect)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/experiments"
    return target


def _wants_page(request: Request) -> bool:
    """Whether an error answers with a page: not for the API (its docs aside) or for
    Prometheus, which reads a 401's status and header, not a login form."""
    path = request.url.path
    return (not path.startswith("/api/") and path != METRICS_PATH) or path == DOCS_PATH


_API_HINTS = {
    status.HTTP_405_METHOD_NOT_ALLOWED: "the Allow header lists the methods this path takes; "
    "GET /api/v1/openapi.json lists every operation",
    status.HTTP_400_BAD_REQUEST: "send a JSON body with Content-Type: application/json",
}


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _allowed(request: Request) -> dict[str, str]:
    """A 405's Allow header: every method some route on the path takes. Starlette's names
    only the first route that matched the path (bench/web/fuzz.py's ST205: /api/v1/experiments
    takes GET and POST, and its 405 said POST alone). Each method is tried against the routes
    as the router itself would match it."""
    routes = request.app.router.routes
    methods = [
        method
        for method in _METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] is Match.FULL for route in routes
        )
    ]
    return {"Allow": ", ".join(methods)} if methods else {}


def install(app: FastAPI) -> None:
    """Add the pages' routes (and the 401 page for browsers) to ``app``."""

    @app.exception_handler(StarletteHTTPException)
    async def _unauthorized(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == status.HTTP_401_UNAUTHORIZED and _wants_page(request):
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return page(
                request, "login.html", None, status_code=401, next=target,
                error="Sign in with an API token to see this page.",
            )  # fmt: skip
        if exc.status_code in _PAGE_ERRORS and _wants_page(request):
            return page(
                request, "error.html", None, status_code=exc.status_code,
                title=_PAGE_ERRORS[exc.status_code], detail=str(exc.detail),
            )  # fmt: skip
        if request.url.path.startswith("/api/"):
            # Raised before a route runs (a method the path does not allow, a body that is
            # not JSON): the API's own error shape, as every other 4xx of /api/v1 has.
            body = {"error": str(exc.detail), "hint": _API_HINTS.get(exc.status_code)}
            headers = dict(exc.headers or {})
            if exc.status_code == status.HTTP_405_METHOD_NOT_ALLOWED:
                headers.update(_allowed(request))
            return JSONResponse(body, status_code=exc.status_code, headers=headers)
        return await http_exception_handler(request, exc)

    @app.get("/", include_in_schema=False)
    def _root() -> RedirectResponse:
        return RedirectResponse("/experiments", status_code=status.HTTP_303_SEE_OTHER)

    @app.get("/login", include_in_schema=False)
    def _login_form(request: Request, next: str = "/experiments") -> Response:
        return page(request, "login.html", None, next=safe_next(next), error="")

    @app.post("/login", include_in_schema=False)
    def _login(
        request: Request,
        token: Annotated[str, Form()] = "",
        next: Annotated[str, Form()] = "/experiments",
    ) -> Response:
        token = token.strip()
        who = principal_for(store_of(request), token)
        if who is None:
            return page(
                request, "login.html", None, status_code=401, next=safe_next(next),
                error="That token is unknown or revoked. Make one with "
                "`hairline token create --name NAME --team TEAM --scope read`.",
            )  # fmt: skip
        response = RedirectResponse(safe_next(next), status_code=status.HTTP_303_SEE_OTHER)
        response.set_cookie(
            COOKIE, token, max_age=_COOKIE_MAX_AGE_S, httponly=True, samesite="lax",
            secure=request.url.scheme == "https", path="/",
        )  # fmt: skip
        return response

    @app.post("/logout", include_in_schema=False)
    def _logout() -> Response:
        response = RedirectResponse("/login", status_code=status.HTTP_303_SEE_OTHER)
        response.delete_cookie(COOKIE, path="/")
        return response

    for module in (views_experiments, views_trends, views_regressions):
        app.include_router(module.router)
