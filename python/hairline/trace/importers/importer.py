"""One import: parsed entries -> labelled trace requests, under the header policy.

Headers the engine owns (``host``, ``content-length``, ...) are always dropped, and so are
credentials and client addresses (:data:`SENSITIVE_HEADERS`) unless ``keep_sensitive``:
a trace is meant to be shared and replayed to test builds.

An import stops at the first bad record, naming file and line, unless ``skip_bad`` is set,
when it is counted by reason. Files are read as lines (``.gz`` transparently) and keep their
name and line number.
"""

from __future__ import annotations

import functools
import gzip
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hairline.errors import ConfigError, DataError
from hairline.trace.format import (
    ENGINE_HEADERS,
    LABELS_HINT,
    MAX_ENDPOINTS,
    Json,
    TraceRequest,
    header_problem,
    request_problem,
)
from hairline.trace.importers.combined import parse_combined_line
from hairline.trace.importers.entry import SKIP_HINT, BadLineError, LogEntry
from hairline.trace.importers.har import dig, har_entries, parse_har_entry
from hairline.trace.importers.jsonlog import parse_json_log_line
from hairline.trace.labels import Labeller

__all__ = [
    "FORMATS",
    "SENSITIVE_HEADERS",
    "ImportOptions",
    "ImportReport",
    "StatusFilter",
    "import_files",
    "import_har_text",
    "import_lines",
    "parse_status_filter",
    "to_trace_request",
]

#: ``--from`` names and the parser each one uses.
FORMATS = {
    "har": "har",
    "combined": "combined",
    "nginx": "combined",
    "apache": "combined",
    "jsonl": "jsonl",
    "nginx-json": "jsonl",
}
#: Dropped unless ``keep_sensitive``: credentials and the addresses of real clients.
SENSITIVE_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "cookie",
        "x-api-key",
        "x-auth-token",
        "x-csrf-token",
        "x-forwarded-for",
        "x-real-ip",
        "forwarded",
    }
)


@dataclass(frozen=True)
class StatusFilter:
    """Keep requests whose response status matches any item (``2xx``, ``304``)."""

    items: tuple[str, ...]

    def __call__(self, status: int | None) -> bool:
        if status is None:
            return False
        text = f"{status:03d}"
        return any(
            text == item or (item.endswith("xx") and text[0] == item[0]) for item in self.items
        )


def parse_status_filter(text: str) -> StatusFilter:
    """``2xx,304`` -> :class:`StatusFilter`; a :class:`ConfigError` for anything else."""
    items = tuple(s.strip().lower() for s in text.split(",") if s.strip())
    bad = [s for s in items if not re.fullmatch(r"[1-5]xx|[1-5][0-9]{2}", s)]
    if bad or not items:
        raise ConfigError(
            f"--status {text!r}: {', '.join(bad) or 'nothing'} is not a status or class",
            hint="give statuses or classes separated by commas, e.g. --status 2xx,304",
        )
    return StatusFilter(items)


@dataclass(frozen=True)
class ImportOptions:
    """How entries become trace requests.

    ``keep_headers`` keeps the referer and user agent of combined logs (other formats
    always keep their headers). ``drop_headers`` are names to drop besides the engine's
    own and, unless ``keep_sensitive``, :data:`SENSITIVE_HEADERS`. ``hosts`` keeps only
    requests to these hosts (``name`` or ``name:port``).
    """

    labeller: Labeller = field(default_factory=Labeller)
    skip_bad: bool = False
    keep_headers: bool = False
    drop_headers: frozenset[str] = frozenset()
    keep_sensitive: bool = False
    status: StatusFilter | None = None
    hosts: tuple[str, ...] = ()

    def dropped_headers(self) -> frozenset[str]:
        drop = ENGINE_HEADERS | {h.lower() for h in self.drop_headers}
        return drop if self.keep_sensitive else drop | SENSITIVE_HEADERS


def to_trace_request(
    entry: LogEntry, *, labeller: Labeller, drop: frozenset[str], keep_headers: bool = True
) -> TraceRequest:
    """A :class:`LogEntry` as a trace request: labelled, headers dropped by policy."""
    headers: list[tuple[str, str]] = []
    if keep_headers:
        for name, value in entry.headers:
            if name.lower() in drop:
                continue
            problem = header_problem(name, value)
            if problem is not None:
                raise BadLineError("bad header", problem)
            headers.append((name, value))
    meta = {
        k: v
        for k, v in (("status", entry.status), ("response_bytes", entry.response_bytes))
        if v is not None
    }
    request = TraceRequest(
        path=entry.target,
        method=entry.method,
        headers=tuple(headers),
        body=entry.body,
        endpoint=labeller(entry.target),
        ts_us=entry.ts_us,
        meta=meta or None,
    )
    problem = request_problem(request)
    if problem is not None:
        raise BadLineError("not replayable", problem)
    return request


@dataclass
class ImportReport:
    """What an import read, kept, skipped (bad records, by reason) and filtered out."""

    format: str
    sources: list[str]
    records: int = 0
    requests: list[TraceRequest] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    first_skipped: dict[str, str] = field(default_factory=dict)
    filtered: Counter[str] = field(default_factory=Counter)
    sorted_by_time: bool = False

    def header(self) -> dict[str, Json]:
        """Provenance for the trace header."""
        return {
            "source": "import",
            "format": self.format,
            "files": [Path(s).name for s in self.sources],
            "records": self.records,
            "skipped": dict(self.skipped),
            "filtered": dict(self.filtered),
        }


def _host_matches(host: str | None, wanted: tuple[str, ...]) -> bool:
    if host is None:
        return False
    bare = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    return host in wanted or bare in wanted


class _Importer:
    """Accumulates one import; the parsers stay pure, this class does the bookkeeping."""

    def __init__(self, fmt: str, options: ImportOptions, sources: list[str]) -> None:
        self.options = options
        self.report = ImportReport(format=fmt, sources=sources)
        self.drop = options.dropped_headers()
        self.hosts = tuple(h.lower() for h in options.hosts)
        self.keep_headers = options.keep_headers or fmt != "combined"
        self.labels: set[str] = set()

    def add(self, source: str, line_no: int, parse: Callable[[], LogEntry]) -> None:
        self.report.records += 1
        try:
            entry = parse()
            if self.options.status is not None and not self.options.status(entry.status):
                self.report.filtered["status"] += 1
                return
            if self.hosts and not _host_matches(entry.host, self.hosts):
                self.report.filtered["host"] += 1
                return
            request = to_trace_request(
                entry,
                labeller=self.options.labeller,
                drop=self.drop,
                keep_headers=self.keep_headers,
            )
        except BadLineError as err:
            where = f"{source}:{line_no}" if line_no else source
            if not self.options.skip_bad:
                raise DataError(f"{where}: {err.reason}: {err.detail}", hint=SKIP_HINT) from None
            self.report.skipped[err.reason] += 1
            self.report.first_skipped.setdefault(err.reason, f"{where}: {err.detail}")
            return
        if request.label not in self.labels:
            if len(self.labels) == MAX_ENDPOINTS:
                # Stop here, not after reading the rest of a log for a trace the engine
                # would refuse (and --skip-bad cannot help: the lines are fine).
                where = f"{source}:{line_no}" if line_no else source
                raise ConfigError(
                    f"{where}: {request.label!r} would be endpoint label number "
                    f"{MAX_ENDPOINTS + 1:,}; the engine replays traces of at most "
                    f"{MAX_ENDPOINTS:,} labels",
                    hint=LABELS_HINT,
                )
            self.labels.add(request.label)
        self.report.requests.append(request)

    def finish(self) -> ImportReport:
        requests = self.report.requests
        if requests and all(r.ts_us is not None for r in requests):
            # Logs are written as requests end; replay wants arrival order (stable sort).
            requests.sort(key=lambda r: r.ts_us or 0)
            self.report.sorted_by_time = True
        return self.report


def import_lines(
    fmt: str, lines: Iterable[tuple[str, int, str]], options: ImportOptions | None = None
) -> ImportReport:
    """Import a line format (``combined`` or ``jsonl``) from ``(source, line_no, text)``."""
    kind = FORMATS.get(fmt)
    if kind not in ("combined", "jsonl"):
        raise ConfigError(f"{fmt!r} is not a line format", hint="use combined, nginx or jsonl")
    parse_line = parse_combined_line if kind == "combined" else parse_json_log_line
    opts = options or ImportOptions()
    importer = _Importer(kind, opts, [])
    for source, line_no, text in lines:
        if source not in importer.report.sources:
            importer.report.sources.append(source)
        if not text.strip():
            continue
        importer.add(source, line_no, functools.partial(parse_line, text))
    return importer.finish()


def import_har_text(
    text: str, *, source: str = "<har>", options: ImportOptions | None = None
) -> ImportReport:
    """Import the entries of one HAR document; non-HTTP entries (``data:``) are filtered."""
    opts = options or ImportOptions()
    importer = _Importer("har", opts, [source])
    for index, (line_no, entry) in enumerate(har_entries(text, source), start=1):
        url = dig(entry, "request", "url")
        if isinstance(url, str) and ":" in url and not url.lower().startswith(("http:", "https:")):
            importer.report.records += 1
            importer.report.filtered["not http(s)"] += 1
            continue
        where = f"entry {index}"
        importer.add(
            f"{source}:{line_no}: {where}" if line_no else f"{source}: {where}",
            0,
            functools.partial(parse_har_entry, entry),
        )
    return importer.finish()


def _open_text_lines(path: Path) -> Iterator[tuple[int, str]]:
    with gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb") as f:
        for line_no, raw in enumerate(f, start=1):
            yield line_no, raw.decode("utf-8", "surrogateescape").rstrip("\r\n")


def import_files(
    paths: Sequence[str | Path], fmt: str, options: ImportOptions | None = None
) -> ImportReport:
    """Import files (``.gz`` is read transparently); lines keep their file and number."""
    kind = FORMATS.get(fmt)
    if kind is None:
        raise ConfigError(
            f"--from {fmt!r} is not a format", hint=f"use one of {', '.join(sorted(FORMATS))}"
        )
    files = [Path(p) for p in paths]
    missing = [str(p) for p in files if not p.is_file()]
    if missing:
        raise DataError(f"cannot read {', '.join(missing)}", hint="check the path(s)")
    opts = options or ImportOptions()
    try:
        if kind == "har":
            reports = []
            for p in files:
                data = gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()
                text = data.decode("utf-8-sig", "surrogateescape")
                reports.append(import_har_text(text, source=str(p), options=opts))
            return _merge(reports, kind)

        def lines() -> Iterator[tuple[str, int, str]]:
            for p in files:
                for line_no, text in _open_text_lines(p):
                    yield str(p), line_no, text

        report = import_lines(kind, lines(), opts)
    except (OSError, EOFError) as err:
        raise DataError(f"cannot read input: {err}", hint="check the file(s)") from None
    report.sources = [str(p) for p in files]
    return report


def _merge(reports: list[ImportReport], fmt: str) -> ImportReport:
    if len(reports) == 1:
        return reports[0]
    merged = ImportReport(format=fmt, sources=[s for r in reports for s in r.sources])
    for r in reports:
        merged.records += r.records
        merged.requests.extend(r.requests)
        merged.skipped.update(r.skipped)
        merged.filtered.update(r.filtered)
        for reason, where in r.first_skipped.items():
            merged.first_skipped.setdefault(reason, where)
    if merged.requests and all(r.ts_us is not None for r in merged.requests):
        merged.requests.sort(key=lambda r: r.ts_us or 0)
        merged.sorted_by_time = True
    return merged
