"""``hairline serve``: the dashboard and HTTP API (docs/dashboard.md)."""

from __future__ import annotations

from pathlib import Path

import click

from hairline.cli._base import main
from hairline.cli._options import store_options
from hairline.store.db import open_store
from hairline.web.ratelimit import DEFAULT_BURST, DEFAULT_RATE_PER_S


@main.command()
@store_options
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option("--schedule/--no-schedule", default=True, show_default=True,
              help="Enqueue due periodic A/A runs ([aa] every) while serving.")  # fmt: skip
@click.option("--schedule-poll-s", type=click.FloatRange(1), default=60.0, show_default=True,
              help="How often the scheduler looks for due A/A runs.")  # fmt: skip
@click.option("--rate-per-s", type=click.FloatRange(0.01), default=DEFAULT_RATE_PER_S,
              show_default=True,
              help="API requests a second each token (or address without one) may "
              "make.")  # fmt: skip
@click.option("--burst", type=click.IntRange(1), default=DEFAULT_BURST, show_default=True,
              help="Requests a caller may make at once before --rate-per-s holds it.")  # fmt: skip
@click.option("--log-level", default="warning", show_default=True,
              type=click.Choice(["critical", "error", "warning", "info", "debug"]))  # fmt: skip
def serve(
    db_url: str | None,
    home: Path,
    host: str,
    port: int,
    schedule: bool,
    schedule_poll_s: float,
    rate_per_s: float,
    burst: int,
    log_level: str,
) -> None:
    """Serve the dashboard and the HTTP API (/api/v1, OpenAPI at /api/v1/docs).

    Every route but /healthz needs a token: `hairline token create --team T --scope read`.
    Experiments submitted here are run by `hairline lab process` on the same database.
    """
    import uvicorn

    from hairline.web.app import create_app
    from hairline.web.ratelimit import RateLimiter

    store = open_store(db_url, home=home)
    app = create_app(store, schedule_every_s=schedule_poll_s if schedule else None,
                     limiter=RateLimiter(rate_per_s=rate_per_s, burst=burst))  # fmt: skip
    click.echo(f"hairline serve: http://{host}:{port}/ on {store.shown_url}", err=True)
    try:
        uvicorn.run(app, host=host, port=port, log_level=log_level)
    finally:
        store.close()
