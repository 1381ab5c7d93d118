"""Importers: access logs and browser exports -> trace requests.

Three inputs, each read by a pure parser of one record and an I/O edge that feeds it lines:

- ``har``: HAR 1.2 (a browser's or proxy's export); :mod:`.har`.
- ``combined`` (also ``nginx``, ``apache``): the combined log format of nginx and Apache (and
  the common log format); :mod:`.combined`.
- ``jsonl`` (also ``nginx-json``): one JSON object per line, as nginx writes with
  ``log_format NAME escape=json '{...}'``; :mod:`.jsonlog`.

Each record becomes a :class:`LogEntry` (:mod:`.entry`, with the pieces the parsers share),
then a :class:`~hairline.trace.format.TraceRequest` with an endpoint label (:mod:`.importer`,
which also applies the header policy and counts bad records).
"""

from hairline.trace.importers.combined import format_combined_line, parse_combined_line
from hairline.trace.importers.entry import BadLineError, LogEntry, parse_iso8601_us
from hairline.trace.importers.har import format_har_entry, parse_har_entry
from hairline.trace.importers.importer import (
    FORMATS,
    SENSITIVE_HEADERS,
    ImportOptions,
    ImportReport,
    StatusFilter,
    import_files,
    import_har_text,
    import_lines,
    parse_status_filter,
    to_trace_request,
)
from hairline.trace.importers.jsonlog import format_json_log_line, parse_json_log_line

__all__ = [
    "FORMATS",
    "SENSITIVE_HEADERS",
    "BadLineError",
    "ImportOptions",
    "ImportReport",
    "LogEntry",
    "StatusFilter",
    "format_combined_line",
    "format_har_entry",
    "format_json_log_line",
    "import_files",
    "import_har_text",
    "import_lines",
    "parse_combined_line",
    "parse_har_entry",
    "parse_iso8601_us",
    "parse_json_log_line",
    "parse_status_filter",
    "to_trace_request",
]
