"""``hairline trace import|stats|filter|sample``: make and shape the traces the engine replays.

Each command reads typed options, calls :mod:`hairline.trace`, and prints a summary;
``--json`` writes it as JSON too (``-``: only the JSON, on stdout). docs/traffic.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import numpy as np
from rich.console import Console
from rich.table import Table

from hairline.cli._base import console, main
from hairline.cli._outputs import OutputFile, is_stdout, write_json_output, write_output
from hairline.errors import ConfigError
from hairline.trace.format import (
    Json,
    TraceRequest,
    check_output_path,
    encode_trace,
    read_trace,
    write_trace,
)
from hairline.trace.importers import FORMATS, ImportOptions, import_files, parse_status_filter
from hairline.trace.labels import Labeller, parse_label_rules
from hairline.trace.shape import (
    MixGroup,
    bernoulli_sample,
    derived_header,
    filter_endpoints,
    mix_trace,
    parse_mix,
    parse_reservoir,
    reservoir_sample,
)
from hairline.trace.stats import TraceStats, trace_stats
from hairline.trace.summaries import (
    TraceFilterJson,
    TraceImportJson,
    TraceSampleJson,
    TraceStatsJson,
)

__all__ = ["trace"]

_SPARK = "▁▂▃▄▅▆▇█"
_TOP_ENDPOINTS = 15

json_option = click.option("--json", "json_path", type=OutputFile(),
                           help="Also write the summary as JSON to FILE; '-' prints only the "
                           "JSON, to stdout.")  # fmt: skip
output_option = click.option("-o", "--output", required=True, type=OutputFile(),
                             help="The trace to write (JSONL, docs/trace-format.md; '-' for "
                             "stdout); written atomically.")  # fmt: skip
seed_option = click.option("--seed", type=int, default=0, show_default=True,
                           help="Seed of the random choices.")  # fmt: skip


def _emit(json_path: Path | None, payload: Any, show: Callable[[Console], None]) -> None:
    """Human summary unless ``--json -`` (on stderr if the trace went to stdout); the JSON."""
    out = console()
    if not is_stdout(json_path):
        show(out)
    if json_path is not None:
        write_json_output(out, json_path, payload)


def _write_trace(output: Path, header: Mapping[str, Json] | None,
                 requests: Sequence[TraceRequest]) -> None:  # fmt: skip
    """The trace to ``output``, or for ``-`` to stdout (then the summary goes to stderr)."""
    if is_stdout(output):
        write_output(console(), output, encode_trace(header, requests, target="stdout"))
    else:
        write_trace(output, header, requests)


def _check_output(output: Path) -> None:
    return None if is_stdout(output) else check_output_path(output)


def _count_table(title: str, counts: dict[str, int], examples: dict[str, str]) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("reason")
    table.add_column("lines", justify="right")
    table.add_column("first")
    for reason, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        table.add_row(reason, f"{n:,}", examples.get(reason, ""))
    return table


def _endpoint_table(requests: Sequence[TraceRequest], *, title: str) -> Table:
    stats = trace_stats(requests)
    table = Table(title=title, title_justify="left")
    table.add_column("endpoint")
    table.add_column("requests", justify="right")
    table.add_column("share", justify="right")
    for e in stats.endpoints[:_TOP_ENDPOINTS]:
        table.add_row(e.label, f"{e.count:,}", f"{e.share:.1%}")
    if len(stats.endpoints) > _TOP_ENDPOINTS:
        table.caption = f"{len(stats.endpoints) - _TOP_ENDPOINTS} more: `hairline trace stats`"
    return table


@main.group()
def trace() -> None:
    """Import logs as traces, inspect them, and shape what is replayed (docs/traffic.md)."""


@trace.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--from",
    "fmt",
    required=True,
    type=click.Choice(sorted(FORMATS)),
    help="har (HAR 1.2); nginx, apache or combined (combined log format); "
    "jsonl or nginx-json (one JSON object per line, nginx escape=json).",
)
@output_option
@click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="REGEX=NAME",
    help="Endpoint label rule, split on the last '='; first match wins; NAME may use $1, "
    "${name}. Repeatable.",
)
@click.option(
    "--normalize-ids", is_flag=True, help="Unlabelled paths: id-like segments become :id."
)
@click.option("--skip-bad", is_flag=True, help="Skip bad lines and count them by reason.")
@click.option(
    "--keep-headers", is_flag=True, help="Combined logs: keep the user-agent and referer."
)
@click.option("--drop-header", "drop_headers", multiple=True, metavar="NAME", help="Repeatable.")
@click.option(
    "--keep-sensitive",
    is_flag=True,
    help="Keep credentials and client addresses (authorization, cookie, x-forwarded-for...).",
)
@click.option("--status", "status_text", metavar="2xx,304", help="Keep only these statuses.")
@click.option(
    "--host",
    "hosts",
    multiple=True,
    metavar="HOST[:PORT]",
    help="Keep only requests to this host (har, jsonl). Repeatable.",
)
@json_option
def import_(
    files: tuple[Path, ...],
    fmt: str,
    output: Path,
    labels: tuple[str, ...],
    normalize_ids: bool,
    skip_bad: bool,
    keep_headers: bool,
    drop_headers: tuple[str, ...],
    keep_sensitive: bool,
    status_text: str | None,
    hosts: tuple[str, ...],
    json_path: Path | None,
) -> None:
    """Turn access logs or a HAR export into a trace.

    A line that is not a replayable HTTP request stops the import, naming file and line;
    with --skip-bad it is skipped and counted.
    """
    # Before reading anything: a log can take minutes to import.
    _check_output(output)
    if hosts and FORMATS[fmt] == "combined":
        raise ConfigError(
            "--host: combined logs do not record the host of a request",
            hint="import one virtual host's log file, or log as JSON with $host (--from jsonl)",
        )
    labeller = Labeller(parse_label_rules(labels), normalize_ids=normalize_ids)
    options = ImportOptions(
        labeller=labeller,
        skip_bad=skip_bad,
        keep_headers=keep_headers,
        drop_headers=frozenset(drop_headers),
        keep_sensitive=keep_sensitive,
        status=parse_status_filter(status_text) if status_text is not None else None,
        hosts=hosts,
    )
    report = import_files(files, fmt, options)
    header: dict[str, Json] = {
        **report.header(),
        "labels": labeller.describe(),
        "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    _write_trace(output, header, report.requests)
    kept = report.requests
    summary: TraceImportJson = {
        "output": str(output),
        "format": report.format,
        "files": [str(f) for f in files],
        "records": report.records,
        "requests": len(kept),
        "endpoints": len({r.label for r in kept}),
        "skipped": dict(report.skipped),
        "first_skipped": report.first_skipped,
        "filtered": dict(report.filtered),
        "sorted_by_time": report.sorted_by_time,
    }

    def show(out: Console) -> None:
        out.print(
            f"Imported [bold]{len(kept):,}[/] requests ({summary['endpoints']} endpoints) "
            f"from {report.records:,} {report.format} records into {output}"
        )
        if report.skipped:
            out.print(_count_table("Skipped bad lines", report.skipped, report.first_skipped))
        if report.filtered:
            out.print(
                "Filtered out: " + ", ".join(f"{n:,} by {k}" for k, n in report.filtered.items())
            )
        out.print(_endpoint_table(kept, title="Endpoints"))

    _emit(json_path, summary, show)


def _sparkline(counts: Sequence[int]) -> str:
    top = max(counts, default=0)
    if top == 0:
        return ""
    return "".join(_SPARK[min(len(_SPARK) - 1, c * len(_SPARK) // (top + 1))] for c in counts)


def _print_stats(stats: TraceStats, path: Path, out: Console, *, top: int) -> None:
    overview = Table.grid(padding=(0, 2))
    overview.add_column(style="bold")
    overview.add_column()
    overview.add_row("trace", str(path))
    overview.add_row("requests", f"{stats.request_count:,} ({stats.endpoint_count:,} endpoints)")
    if stats.duration_s is not None:
        rate = f"{stats.mean_rate_per_s:,.1f}/s" if stats.mean_rate_per_s is not None else "-"
        overview.add_row("duration", f"{stats.duration_s:,.3f} s, mean rate {rate}")
    if stats.timed_count < stats.request_count:
        overview.add_row("untimed", f"{stats.request_count - stats.timed_count:,} without ts_us")
    if stats.backwards_count:
        overview.add_row("backwards", f"{stats.backwards_count:,} timestamps go back in time")
    overview.add_row("methods", ", ".join(f"{m} {n:,}" for m, n in stats.methods.items()))
    b = stats.body
    overview.add_row(
        "body bytes", f"mean {b.mean_bytes:,.0f}, p50 {b.p50_bytes:,}, p99 {b.p99_bytes:,}"
    )
    out.print(overview)
    table = Table(title="Requests by endpoint", title_justify="left")
    for name, justify in (
        ("endpoint", "left"),
        ("requests", "right"),
        ("share", "right"),
        ("methods", "left"),
        ("body mean B", "right"),
        ("p50 B", "right"),
        ("p99 B", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for e in stats.endpoints[:top]:
        table.add_row(
            e.label,
            f"{e.count:,}",
            f"{e.share:.1%}",
            " ".join(e.methods),
            f"{e.body.mean_bytes:,.0f}",
            f"{e.body.p50_bytes:,}",
            f"{e.body.p99_bytes:,}",
        )
    rest = stats.endpoints[top:]
    if rest:
        requests = sum(e.count for e in rest)
        table.caption = (
            f"and {len(rest):,} more endpoints with {requests:,} requests "
            f"({requests / stats.request_count:.1%}); --top N shows more, --json - all"
        )
    out.print(table)
    if stats.rate:
        counts = [bucket.count for bucket in stats.rate]
        out.print(
            f"Rate over time ({len(counts)} buckets of {stats.bucket_s:g} s, "
            f"peak {stats.peak_rate_per_s:,.1f}/s):"
        )
        out.print(_sparkline(counts), overflow="fold")


@trace.command("stats")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--bucket-s",
    type=click.FloatRange(0, min_open=True),
    help="Length of a rate bucket in seconds (default: at most 60 buckets).",
)
@click.option(
    "--top",
    type=click.IntRange(1),
    default=_TOP_ENDPOINTS,
    show_default=True,
    help="List this many endpoints, the busiest first; the rest are counted.",
)
@json_option
def stats_(file: Path, bucket_s: float | None, top: int, json_path: Path | None) -> None:
    """Requests by endpoint, rate over time, body sizes and methods of a trace.

    The JSON (--json) holds every endpoint; the table lists the --top busiest.
    """
    parsed = read_trace(file)
    stats = trace_stats(parsed.requests, bucket_s=bucket_s)
    # Built only when asked for: with a label per request it is most of the work.
    # Its fields as they are: _emit makes the payload plain once (twice was 3 s more of 8 s
    # for a trace with 70,000 labels).
    s = stats
    payload: TraceStatsJson | None = None if json_path is None else {
        "trace": str(file), "request_count": s.request_count,
        "endpoint_count": s.endpoint_count, "timed_count": s.timed_count,
        "duration_s": s.duration_s, "mean_rate_per_s": s.mean_rate_per_s,
        "backwards_count": s.backwards_count, "first_ts_us": s.first_ts_us,
        "bucket_s": s.bucket_s, "peak_rate_per_s": s.peak_rate_per_s, "methods": s.methods,
        "body": s.body, "endpoints": s.endpoints, "rate": s.rate,
    }  # fmt: skip
    _emit(json_path, payload, lambda out: _print_stats(stats, file, out, top=top))


@trace.command("filter")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--endpoint",
    "endpoints",
    multiple=True,
    metavar="LABEL",
    help="Keep these endpoint labels (glob patterns allowed). Repeatable.",
)
@click.option(
    "--mix",
    "mixes",
    multiple=True,
    metavar="LABEL=WEIGHT",
    help="Proportion of the requests with this label (glob allowed); weights need not sum "
    "to 1. Repeatable.",
)
@click.option(
    "--count",
    type=click.IntRange(1),
    help="Write exactly N requests (repeating requests when a label has too few).",
)
@seed_option
@output_option
@json_option
def filter_(
    file: Path,
    endpoints: tuple[str, ...],
    mixes: tuple[str, ...],
    count: int | None,
    seed: int,
    output: Path,
    json_path: Path | None,
) -> None:
    """Keep the endpoints a change touches and set their proportions.

    Without --count: the largest sample without repeats that has exactly the --mix
    proportions, in recorded order. With --count N: N requests in those proportions.
    """
    if not (endpoints or mixes or count):
        raise ConfigError(
            "trace filter needs --endpoint, --mix or --count",
            hint="see `hairline trace filter --help`",
        )
    weights = parse_mix(mixes)
    _check_output(output)
    parsed = read_trace(file)
    kept = filter_endpoints(parsed.requests, endpoints)
    step: dict[str, Json] = {"op": "filter", "endpoint": list(endpoints)}
    groups: list[MixGroup] = []
    passes = 1
    if weights or count is not None:
        result = mix_trace(kept, weights, count=count, rng=np.random.default_rng(seed))
        kept = result.requests
        passes = result.passes
        groups = list(result.groups)
        step.update(mix=list(mixes), count=count, seed=seed)
    _write_trace(output, derived_header(parsed.header, step), kept)
    summary: TraceFilterJson = {
        "input": str(file),
        "output": str(output),
        "input_requests": len(parsed.requests),
        "requests": len(kept),
        "passes": passes,
        "with_replacement": passes > 1,
        "groups": groups,
    }

    def show(out: Console) -> None:
        out.print(
            f"Wrote [bold]{len(kept):,}[/] requests to {output} "
            f"(the input had {len(parsed.requests):,})"
        )
        if groups:
            table = Table(title="Mix", title_justify="left")
            for name in ("label", "weight", "available", "chosen", "share", "max copies"):
                table.add_column(name, justify="left" if name == "label" else "right")
            for g in groups:
                table.add_row(
                    g.pattern,
                    f"{g.weight:g}",
                    f"{g.available:,}",
                    f"{g.chosen:,}",
                    f"{g.share:.2%}",
                    str(g.max_copies),
                )
            out.print(table)
        else:
            out.print(_endpoint_table(kept, title="Endpoints kept"))
        if passes > 1:
            out.print(
                f"[yellow]Some labels had too few requests: they repeat, over {passes} passes of "
                "the recorded timeline (timestamps of pass j shifted by j trace spans).[/]"
            )

    _emit(json_path, summary, show)


@trace.command("sample")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--reservoir",
    "reservoir_text",
    metavar="K/T",
    help="At most K requests per interval T of recorded time (100/1s, 10/500ms, 5/1m).",
)
@click.option("--per-endpoint", is_flag=True, help="With --reservoir: K per endpoint.")
@click.option(
    "--fraction",
    type=click.FloatRange(0, 1, min_open=True),
    help="Keep each request with probability P.",
)
@seed_option
@output_option
@json_option
def sample_(
    file: Path,
    reservoir_text: str | None,
    per_endpoint: bool,
    fraction: float | None,
    seed: int,
    output: Path,
    json_path: Path | None,
) -> None:
    """Sample a trace: K per interval T (reservoir), or a uniform fraction."""
    if (reservoir_text is None) == (fraction is None):
        raise ConfigError(
            "trace sample needs exactly one of --reservoir K/T and --fraction P",
            hint="e.g. --reservoir 100/1s, or --fraction 0.01",
        )
    if per_endpoint and reservoir_text is None:
        raise ConfigError("--per-endpoint works with --reservoir", hint="add --reservoir K/T")
    rng = np.random.default_rng(seed)
    _check_output(output)
    parsed = read_trace(file)
    step: dict[str, Json] = {"op": "sample", "seed": seed}
    if reservoir_text is not None:
        reservoir = parse_reservoir(reservoir_text)
        result = reservoir_sample(parsed.requests, reservoir, per_endpoint=per_endpoint, rng=rng)
        step.update(reservoir=reservoir.text, per_endpoint=per_endpoint)
    else:
        assert fraction is not None
        result = bernoulli_sample(parsed.requests, fraction, rng=rng)
        step.update(fraction=fraction)
    _write_trace(output, derived_header(parsed.header, step), result.requests)
    summary: TraceSampleJson = {
        "input": str(file), "output": str(output), "input_requests": result.total,
        "requests": len(result.requests), "intervals": result.intervals,
        "full_intervals": result.full_intervals, "seed": seed,
    }  # fmt: skip
    if reservoir_text is not None:
        summary["reservoir"], summary["per_endpoint"] = reservoir.text, per_endpoint
    elif fraction is not None:
        summary["fraction"] = fraction

    def show(out: Console) -> None:
        share = len(result.requests) / result.total if result.total else 0.0
        out.print(
            f"Kept [bold]{len(result.requests):,}[/] of {result.total:,} requests "
            f"({share:.2%}) into {output}"
        )
        if reservoir_text is not None:
            out.print(
                f"{result.intervals:,} intervals{' x endpoints' if per_endpoint else ''}, "
                f"{result.full_intervals:,} of them filled to K"
            )

    _emit(json_path, summary, show)
