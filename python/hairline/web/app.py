"""The FastAPI application: the API under ``/api/v1`` (api.py), the pages (pages.py), the
static files, ``/healthz``, ``/metrics`` for Prometheus (metrics.py); and, when asked,
the periodic A/A scheduler in the background."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from hairline import __version__
from hairline.store.db import Store
from hairline.web.aamodels import HistoryModels
from hairline.web.auth import Principal
from hairline.web.deps import DOCS_PATH, OPENAPI_PATH, require
from hairline.web.limits import RequestLimits
from hairline.web.ratelimit import RateLimiter

__all__ = ["STATIC", "TEMPLATES", "create_app"]

_log = logging.getLogger("hairline.serve")
# Module level: FastAPI resolves the routes' (string) annotations in the module's globals.
_Reader = Annotated[Principal, Depends(require("read"))]
TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"


def create_app(
    store: Store, *, schedule_every_s: float | None = None, limiter: RateLimiter | None = None
) -> FastAPI:
    """The application over ``store``. With ``schedule_every_s``, due periodic A/A runs are
    enqueued that often while it serves (docs/dashboard.md); ``limiter`` holds each API
    caller to its rate (default :class:`RateLimiter`'s)."""
    from hairline.web import api, metrics, pages

    aa_models = HistoryModels(store)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        task = None
        if schedule_every_s is not None:
            task = asyncio.create_task(_schedule_loop(store, schedule_every_s))
        try:
            yield
        finally:
            aa_models.close()
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    app = FastAPI(
        title="hairline",
        version=__version__,
        description="Experiments, verdicts and release gates of a hairline lab.",
        lifespan=lifespan,
        # Served below, behind a token like every route but /healthz and the login page.
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    app.state.store = store
    app.state.aa_models = aa_models  # the A/A page's model choices (web/aamodels.py)
    # Outermost: a request's rate, token and size are checked before anything reads its body.
    app.add_middleware(
        RequestLimits, store=store, limiter=limiter if limiter is not None else RateLimiter()
    )

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, str]:
        return {"status": "ok", "version": __version__}

    app.include_router(api.router)
    app.include_router(metrics.router)
    _install_docs(app)
    pages.install(app)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def _install_docs(app: FastAPI) -> None:
    """The OpenAPI document (with its bearer scheme) and Swagger UI, served from the package
    (a lab without internet still sees them); both need a read token, as the API does."""

    def schema() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(title=app.title, version=app.version,
                                   description=app.description, routes=app.routes)  # fmt: skip
            document.setdefault("components", {})["securitySchemes"] = {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An API token (`hairline token create`), sent as "
                    "'Authorization: Bearer hl_...'. Every route needs one.",
                }
            }
            document["security"] = [{"bearer": []}]
            _errors_as_json(document)
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = schema  # type: ignore[method-assign]

    @app.get(OPENAPI_PATH, include_in_schema=False)
    def _openapi(_who: _Reader) -> dict[str, Any]:
        return schema()

    @app.get(DOCS_PATH, include_in_schema=False)
    def _docs(_who: _Reader) -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=OPENAPI_PATH,
            title="hairline API",
            swagger_js_url="/static/vendor/swagger-ui-bundle.js",
            swagger_css_url="/static/vendor/swagger-ui.css",
            swagger_favicon_url="data:,",
        )


def _errors_as_json(document: dict[str, Any]) -> None:
    """Every 4xx answer is JSON (web/api.py's ``_error``), also on a route whose success is
    text (``report.md``), where FastAPI files the declared errors under the route's own
    media type."""
    for operation in (op for path in document.get("paths", {}).values() for op in path.values()):
        for code, response in operation.get("responses", {}).items():
            content = response.get("content")
            if code.startswith("4") and content and "application/json" not in content:
                response["content"] = {"application/json": next(iter(content.values()))}


async def _schedule_loop(store: Store, every_s: float) -> None:
    from hairline.lab.periodic import enqueue_due

    while True:
        try:
            # The database calls block; a thread keeps the server answering meanwhile.
            await asyncio.to_thread(enqueue_due, store)
        except Exception as err:  # a restarting database must not end the scheduler
            _log.warning("periodic A/A: enqueueing due runs failed (%s); trying again", err)
        await asyncio.sleep(every_s)
