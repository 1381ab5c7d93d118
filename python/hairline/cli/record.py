"""``hairline record``: the recording proxy, served by ``hairline-engine record``.

This command only finds the engine, hands it the flags, forwards SIGINT/SIGTERM to it and
returns its exit status: the proxy path must never run through Python. docs/recording.md
explains each flag and how to record in production safely.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

import click

from hairline.cli._base import EXIT_ERROR, main
from hairline.cli._outputs import OutputFile
from hairline.engine import find_engine

__all__ = ["engine_args", "record", "supervise"]

# After a forwarded signal the engine stops within about 2 s (in-flight grace plus a bounded
# drain of the writer); this is how long it gets before it is killed.
_STOP_TIMEOUT_S = 10.0


def engine_args(
    *,
    listen: str,
    upstream: str,
    out: Path,
    sample: float | None = None,
    reservoir: str | None = None,
    reservoir_per_endpoint: bool = False,
    seed: int | None = None,
    labels: Sequence[str] = (),
    normalize_ids: bool = False,
    key_header: str | None = None,
    key_cookie: str | None = None,
    drop_headers: Sequence[str] = (),
    mirror: str | None = None,
    mirror_all: bool = False,
    mirror_queue: int | None = None,
    mirror_connections: int | None = None,
    mirror_timeout_ms: int | None = None,
    stats_path: str | None = None,
    queue: int | None = None,
    max_body_bytes: int | None = None,
    upstream_timeout_ms: int | None = None,
    max_connections: int | None = None,
    service: str | None = None,
) -> list[str]:
    """The ``hairline-engine record`` arguments for these options.

    Options left at ``None`` are not passed, so the engine's defaults (docs/engine.md) are
    the only ones.
    """
    args = ["record", "--listen", listen, "--upstream", upstream, "--out", str(out)]
    valued: list[tuple[str, object]] = [
        ("--sample", sample),
        ("--reservoir", reservoir),
        ("--seed", seed),
        ("--key-header", key_header),
        ("--key-cookie", key_cookie),
        ("--mirror", mirror),
        ("--mirror-queue", mirror_queue),
        ("--mirror-connections", mirror_connections),
        ("--mirror-timeout-ms", mirror_timeout_ms),
        ("--stats-path", stats_path),
        ("--queue", queue),
        ("--max-body-bytes", max_body_bytes),
        ("--upstream-timeout-ms", upstream_timeout_ms),
        ("--max-connections", max_connections),
        ("--service", service),
    ]
    for flag, value in valued:
        if value is not None:
            # `--flag=value` keeps a value that starts with '-' from reading as a flag.
            args.append(f"{flag}={value}")
    args += [f"--label={rule}" for rule in labels]
    args += [f"--drop-header={name}" for name in drop_headers]
    if reservoir_per_endpoint:
        args.append("--reservoir-per-endpoint")
    if normalize_ids:
        args.append("--normalize-ids")
    if mirror_all:
        args.append("--mirror-all")
    return args


def supervise(command: Sequence[str], *, stop_timeout_s: float = _STOP_TIMEOUT_S) -> int:
    """Runs ``command`` with this process's stdio, forwarding SIGINT and SIGTERM to it.

    Returns its exit status; a child killed by a signal counts as an error (2).
    """
    proc = subprocess.Popen(list(command))
    forwarded: list[int] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        forwarded.append(signum)
        if proc.poll() is None:
            proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    kill_at: float | None = None
    try:
        while True:
            try:
                code = proc.wait(timeout=0.1)
                break
            except subprocess.TimeoutExpired:
                if forwarded and kill_at is None:
                    kill_at = time.monotonic() + stop_timeout_s
                if kill_at is not None and time.monotonic() > kill_at:
                    proc.kill()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if code < 0:
        click.secho(
            f"error: hairline-engine record was killed by signal {-code}", fg="red", err=True
        )
        return EXIT_ERROR
    return code


@main.command()
@click.option("--listen", required=True, metavar="HOST:PORT", help="Address to listen on.")
@click.option(
    "--upstream", required=True, metavar="URL", help="The live service, http://host:port."
)
@click.option(
    "--out",
    required=True,
    type=OutputFile(
        refuse_stdout="the recorder's stdout says where it listens, and it appends to the "
        "trace file as it records"
    ),
    help="The trace to write (JSONL).",
)
@click.option(
    "--sample",
    type=click.FloatRange(0, 1, min_open=True),
    help="Record each request with this probability.",
)
@click.option("--reservoir", metavar="K/T", help="Record at most K per interval T (100/1s).")
@click.option("--reservoir-per-endpoint", is_flag=True, help="K per endpoint label.")
@click.option("--seed", type=click.IntRange(0), help="Seed of the sampling decisions.")
@click.option("--label", "labels", multiple=True, metavar="REGEX=NAME", help="Endpoint label rule.")
@click.option(
    "--normalize-ids", is_flag=True, help="Label unmatched paths with ids replaced by :id."
)
@click.option("--key-header", metavar="NAME", help="Header whose value is the ordering key.")
@click.option("--key-cookie", metavar="NAME", help="Cookie whose value is the ordering key.")
@click.option("--drop-header", "drop_headers", multiple=True, metavar="NAME", help="Never record.")
@click.option("--mirror", metavar="URL", help="Also send sampled requests to this test instance.")
@click.option("--mirror-all", is_flag=True, help="Mirror every request, not only sampled ones.")
@click.option("--mirror-queue", type=click.IntRange(1), metavar="N")
@click.option("--mirror-connections", type=click.IntRange(1, 64), metavar="N")
@click.option("--mirror-timeout-ms", type=click.IntRange(1), metavar="MS")
@click.option("--stats-path", metavar="PATH", help="Counters path [/__hairline/stats].")
@click.option("--queue", type=click.IntRange(1), metavar="N", help="Samples waiting to be written.")
@click.option("--max-body-bytes", type=click.IntRange(0), metavar="BYTES")
@click.option("--upstream-timeout-ms", type=click.IntRange(1), metavar="MS")
@click.option("--max-connections", type=click.IntRange(1), metavar="N")
@click.option("--service", metavar="NAME", help="Service name for the trace header.")
def record(
    listen: str,
    upstream: str,
    out: Path,
    sample: float | None,
    reservoir: str | None,
    reservoir_per_endpoint: bool,
    seed: int | None,
    labels: tuple[str, ...],
    normalize_ids: bool,
    key_header: str | None,
    key_cookie: str | None,
    drop_headers: tuple[str, ...],
    mirror: str | None,
    mirror_all: bool,
    mirror_queue: int | None,
    mirror_connections: int | None,
    mirror_timeout_ms: int | None,
    stats_path: str | None,
    queue: int | None,
    max_body_bytes: int | None,
    upstream_timeout_ms: int | None,
    max_connections: int | None,
    service: str | None,
) -> None:
    """Record live traffic safely: a proxy that never delays a request.

    Forwards every request to --upstream unchanged and writes a sample of them to --out as
    a hairline trace. Stops cleanly on SIGINT/SIGTERM and prints its counters as JSON on
    stderr.
    """
    if sample is not None and reservoir is not None:
        raise click.UsageError("give --sample P or --reservoir K/T, not both")
    if reservoir_per_endpoint and reservoir is None:
        raise click.UsageError("--reservoir-per-endpoint needs --reservoir K/T")
    if key_header is not None and key_cookie is not None:
        raise click.UsageError("give --key-header or --key-cookie, not both")
    if mirror_all and mirror is None:
        raise click.UsageError("--mirror-all needs --mirror URL")
    args = engine_args(
        listen=listen,
        upstream=upstream,
        out=out,
        sample=sample,
        reservoir=reservoir,
        reservoir_per_endpoint=reservoir_per_endpoint,
        seed=seed,
        labels=labels,
        normalize_ids=normalize_ids,
        key_header=key_header,
        key_cookie=key_cookie,
        drop_headers=drop_headers,
        mirror=mirror,
        mirror_all=mirror_all,
        mirror_queue=mirror_queue,
        mirror_connections=mirror_connections,
        mirror_timeout_ms=mirror_timeout_ms,
        stats_path=stats_path,
        queue=queue,
        max_body_bytes=max_body_bytes,
        upstream_timeout_ms=upstream_timeout_ms,
        max_connections=max_connections,
        service=service,
    )
    sys.exit(supervise([str(find_engine()), *args]))
