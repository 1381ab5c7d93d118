"""The FastAPI application: the API under ``/api/v1`` (api.py), the pages (pages.py), the
static files, ``/healthz``; and, when asked, the periodic A/A scheduler in the background."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from hairline import __version__
from hairline.store.db import Store
from hairline.web.limits import BodyLimits

__all__ = ["STATIC", "TEMPLATES", "create_app"]

_log = logging.getLogger("hairline.serve")
TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"


def create_app(store: Store, *, schedule_every_s: float | None = None) -> FastAPI:
    """The application over ``store``. With ``schedule_every_s``, due periodic A/A runs are
    enqueued that often while it serves (docs/dashboard.md)."""
    from hairline.web import api, pages

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        task = None
        if schedule_every_s is not None:
            task = asyncio.create_task(_schedule_loop(store, schedule_every_s))
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    app = FastAPI(
        title="hairline",
        version=__version__,
        description="Experiments, verdicts and release gates of a hairline lab.",
        lifespan=lifespan,
        openapi_url="/api/v1/openapi.json",
        docs_url="/api/v1/docs",
        redoc_url=None,
    )
    app.state.store = store
    # Outermost: a request's size and token are checked before anything reads its body.
    app.add_middleware(BodyLimits, store=store)

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, str]:
        return {"status": "ok", "version": __version__}

    app.include_router(api.router)
    pages.install(app)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


async def _schedule_loop(store: Store, every_s: float) -> None:
    from hairline.lab.periodic import enqueue_due

    while True:
        try:
            # The database calls block; a thread keeps the server answering meanwhile.
            await asyncio.to_thread(enqueue_due, store)
        except Exception as err:  # a restarting database must not end the scheduler
            _log.warning("periodic A/A: enqueueing due runs failed (%s); trying again", err)
        await asyncio.sleep(every_s)
