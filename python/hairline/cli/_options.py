"""Options the lab's commands share (the database, reports, the backend, waiting and
progress), each declared once so that every command spells and documents it alike."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from hairline.cli._outputs import OutputFile, write_json_output
from hairline.config.sections import MAX_HOST_PAIRS
from hairline.errors import ConfigError
from hairline.hosts.agent import ray_environment
from hairline.report.otlpexport import DEFAULT_TIMEOUT_S, OtlpTarget, metrics_url
from hairline.store.db import DEFAULT_HOME, url_has_password, url_shown

__all__ = [
    "RUN_WAIT_S",
    "backend_options",
    "chosen_backend",
    "db_option",
    "document_options",
    "esc",
    "junit_option",
    "otlp_options",
    "otlp_target",
    "parse_host_pairs",
    "progress_option",
    "report_options",
    "store_options",
    "wait_option",
    "write_json_output",
]

# How long `hairline run` waits for hosts or a Ray head before it gives up (exit 3): long
# enough for a busy lab to free hosts or a head to be restarted, short enough that a CI
# job does not sit until the CI system's own timeout kills it without a word.
RUN_WAIT_S = 600.0


def esc(text: str) -> str:
    """``text`` shown literally by rich (file names and messages may hold brackets)."""
    return escape(text)


def _db_without_password(
    _ctx: click.Context, _param: click.Parameter, url: str | None
) -> str | None:
    if url is not None and url_has_password(url):
        raise ConfigError(
            f"--db {url_shown(url)}: a password on the command line is seen by every user of "
            "this machine (ps, /proc) and kept in shell histories and CI logs",
            hint="put the URL in a file only you can read (chmod 600) and set "
            "HAIRLINE_DB_FILE to it, or set HAIRLINE_DB; or leave the password out of the "
            "URL and give it to PostgreSQL's client in ~/.pgpass or PGPASSFILE",
        )
    return url


def db_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--db URL`` (into ``db_url``): a URL without a password (those come from a file or
    the environment)."""
    return click.option(
        "--db",
        "db_url",
        metavar="URL",
        callback=_db_without_password,
        help="Database URL, without a password (default $HAIRLINE_DB, or the URL in the file "
        "$HAIRLINE_DB_FILE names, else SQLite in --home).",
    )(fn)


def store_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = db_option(fn)
    return click.option(
        "--home",
        type=click.Path(file_okay=False, path_type=Path),
        default=DEFAULT_HOME,
        show_default=True,
        help="Folder for the SQLite database, builds and experiment artifacts.",
    )(fn)


def report_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option("--json", "json_path", type=OutputFile(),
                      help="Write the report as JSON ('-' for stdout).")(fn)  # fmt: skip
    fn = click.option("--markdown", "markdown_path", type=OutputFile(),
                      help="Write a Markdown report ('-' for stdout); also appended to "
                      "$GITHUB_STEP_SUMMARY when that is set.")(fn)  # fmt: skip
    fn = junit_option(fn)
    fn = otlp_options(fn)
    return click.option("--html", "html_path", type=OutputFile(),
                        help="Copy the self-contained HTML report here ('-' for "
                        "stdout).")(fn)  # fmt: skip


def junit_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--junit", "junit_path", type=OutputFile(),
        help="Write JUnit XML ('-' for stdout): one test case per metric verdict, a "
        "regression (or, unless the service's gate lets it pass, an inconclusive verdict) a "
        "failure.",
    )(fn)  # fmt: skip


def _otlp_url(_ctx: click.Context, _param: click.Parameter, endpoint: str | None) -> str | None:
    # Checked before anything runs: a typo must not surface after an hour of trials.
    return None if endpoint is None else metrics_url(endpoint)


def otlp_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--otlp URL`` (into ``otlp_url``, the full metrics URL) and ``--otlp-timeout-s``."""
    fn = click.option(
        "--otlp-timeout-s", type=click.FloatRange(0.1, 300), default=DEFAULT_TIMEOUT_S,
        show_default=True, metavar="SECONDS",
        help="How long --otlp may take, retries included; then a warning, nothing more.",
    )(fn)  # fmt: skip
    return click.option(
        "--otlp", "otlp_url", metavar="URL", callback=_otlp_url,
        help="Send the verdicts and per-trial values as OpenTelemetry gauges to this "
        "OTLP/HTTP endpoint (a collector's http://HOST:4318; /v1/metrics is added to a URL "
        "without a path). A failed export warns and changes no exit status.",
    )(fn)  # fmt: skip


def otlp_target(url: str | None, timeout_s: float) -> OtlpTarget | None:
    return None if url is None else OtlpTarget(url, timeout_s)


def backend_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option("--backend", type=click.Choice(["local", "ray"]), default="local",
                      show_default=True,
                      help="Where arms run: this machine's CPU sets, or test machines that "
                      "joined with `hairline agent start` (docs/scale-out.md).")(fn)  # fmt: skip
    return click.option("--ray-address", metavar="HOST:PORT", envvar="RAY_ADDRESS",
                        help="With --backend ray: the head ($RAY_ADDRESS).")(fn)  # fmt: skip


def wait_option(default_s: float, what: str) -> Callable[[Callable[..., Any]], Any]:
    """``--wait-s``: how long the experiment may wait for hosts or a Ray head without
    moving on (a trial ending or its phase changing starts the count again); 0 = forever."""
    shown = "forever" if default_s == 0 else f"{default_s:g}"
    return click.option(
        "--wait-s", type=click.FloatRange(0), default=default_s, metavar="SECONDS",
        help=f"Give up after waiting this long for hosts or a Ray head with no trial "
        f"ending meanwhile: {what} (exit 3). 0 waits forever. Default: {shown}.",
    )  # fmt: skip


def progress_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--progress", "progress_mode", type=click.Choice(["text", "json"]), default="text",
        show_default=True,
        help="How progress is shown: lines and a bar on the terminal, or one JSON object "
        "per line on stderr (each processor event, the waiting and how long, giving up).",
    )(fn)  # fmt: skip


def chosen_backend(backend: str, ray_address: str | None) -> dict[str, Any]:
    """The processor options of ``--backend``; the Ray head and token checked up front."""
    if backend == "local":
        return {}
    if not ray_address:
        raise ConfigError(
            "--backend ray needs the Ray head's address",
            hint="pass --ray-address HOST:PORT (or set RAY_ADDRESS)",
        )
    if importlib.util.find_spec("ray") is None:
        raise ConfigError(
            "--backend ray: Ray is not installed in this Python",
            hint="pip install 'hairline[ray]' (make build installs it)",
        )
    ray_environment()  # a token file others may read is refused before anything runs
    return {"backend": backend, "ray_address": ray_address}


def document_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--json, --markdown and --html: where a result is written (tuning runs, an
    attribution)."""
    for option in reversed(
        [
            click.option(
                "--json",
                "json_path",
                type=OutputFile(),
                help="Write the result as JSON ('-' for stdout).",
            ),
            click.option(
                "--markdown",
                "markdown_path",
                type=OutputFile(),
                help="Write the result as Markdown ('-' for stdout).",
            ),
            click.option(
                "--html",
                "html_path",
                type=OutputFile(),
                help="Write an HTML page with the result's chart ('-' for stdout).",
            ),
        ]
    ):
        fn = option(fn)
    return fn


def parse_host_pairs(text: str | None) -> tuple[int, ...]:
    """``--host-pairs 1,2,4``: numbers of host pairs, each 1 to 64; () when not given."""
    if not text:
        return ()
    try:
        pairs = tuple(int(part) for part in text.split(","))
    except ValueError:
        pairs = ()
    if not pairs or any(not 1 <= p <= MAX_HOST_PAIRS for p in pairs):
        raise ConfigError(
            f"--host-pairs {text!r}: give numbers of host pairs from 1 to {MAX_HOST_PAIRS}, "
            "separated by commas",
            hint="e.g. --host-pairs 1,2,4",
        )
    return tuple(sorted(set(pairs)))
