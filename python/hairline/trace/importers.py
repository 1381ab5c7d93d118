"""Importers: access logs and browser exports -> trace requests.

Three inputs, each read by a pure parser of one record and an I/O edge that feeds it lines:

- ``har``: HAR 1.2 (a browser's or proxy's export). Everything a request carries: method,
  URL, headers, body (``postData``), start time with milliseconds.
- ``combined`` (also ``nginx``, ``apache``): the combined log format
  ``%h %l %u %t "%r" %>s %b "%{Referer}i" "%{User-Agent}i"`` of nginx and Apache (and the
  common log format, without the last two fields). Method, target and a timestamp in whole
  seconds; the only headers are the referer and user agent, kept with ``keep_headers``.
  nginx escapes ``"`` as ``\\x22``, Apache as ``\\"``; both are read.
- ``jsonl`` (also ``nginx-json``): one JSON object per line, as nginx writes with
  ``log_format NAME escape=json '{...}'``. Keys are nginx variable names (``msec``,
  ``request``, ``status``, ``http_user_agent``, ``request_body``, ...) or the generic ones
  listed in docs/traffic.md.

Each record becomes a :class:`LogEntry`, then a :class:`~hairline.trace.format.TraceRequest`
with an endpoint label. A record that is not a replayable HTTP request (``"-"``, TLS bytes
sent to a plain-text port, a truncated line, a bad timestamp) is a :class:`BadLineError`;
an import stops at the first one, naming file and line, unless ``skip_bad`` is set, when it
is counted by reason.

Headers the engine owns (``host``, ``content-length``, ...) are always dropped, and so are
credentials and client addresses (:data:`SENSITIVE_HEADERS`) unless ``keep_sensitive``:
a trace is meant to be shared and replayed to test builds.
"""

from __future__ import annotations

import base64
import binascii
import calendar
import functools
import gzip
import json
import re
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal, InvalidOperation
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
from hairline.trace.labels import Labeller

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

_SKIP_HINT = (
    "fix or delete that line, or pass --skip-bad to skip bad lines and count them by reason"
)
_MONTHS = {
    m: i
    for i, m in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"),
        start=1,
    )
}
_MONTH_NAMES = {i: m for m, i in _MONTHS.items()}
# %h %l %u [%t] "%r" %>s %b ["referer" "agent"] [anything nginx/Apache appends]
_QUOTED = r'"((?:[^"\\]|\\.)*)"'
# What follows "%h %l %u ", which parse_combined_line finds as the first " [" (a regex
# scanning for it would backtrack quadratically on lines with many " [").
_COMBINED_REST = re.compile(
    r"\[([^\]]*)\] "
    + _QUOTED
    + r" (\d{3}|-) (\d+|-)(?: "
    + _QUOTED
    + " "
    + _QUOTED
    + r"(?:\s.*)?)?",
    re.DOTALL,
)
_CLF_TIME = re.compile(
    r"(\d{2})/([A-Z][a-z]{2})/(\d{4}):(\d{2}):(\d{2}):(\d{2}) ([+-])(\d{2})(\d{2})", re.ASCII
)
_ISO_TIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d+))?"
    r"(?:([Zz])|([+-])(\d{2}):?(\d{2}))?",
    re.ASCII,
)
_REQUEST_LINE = re.compile(
    rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+) +([^ ]+)(?: +HTTP/[0-9](?:\.[0-9])?)? *"
)
_ABSOLUTE = re.compile(rb"[Hh][Tt][Tt][Pp][Ss]?://([^/?#]*)(.*)", re.DOTALL)
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]+)?")
_ESCAPE = re.compile(rb"\\(x[0-9A-Fa-f]{2}|.)", re.DOTALL)
_C_ESCAPES = {b"n": b"\n", b"t": b"\t", b"r": b"\r", b"v": b"\x0b", b"f": b"\x0c"}
# Bytes a trace path may not hold as they are (docs/trace-format.md): percent-encoded.
_UNSAFE_TARGET_BYTES = frozenset(range(0x21)) | {0x7F} | frozenset(range(0x80, 0x100))
_CONTROL_BYTES = frozenset(range(0x20)) | {0x7F}


class BadLineError(DataError):
    """A record that is not a replayable HTTP request; ``reason`` is a short counting key."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}", hint=_SKIP_HINT)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One logged request, before labelling and header policy.

    ``target`` is the path with its query, already safe for a trace (bytes a trace path
    may not hold are percent-encoded). ``ts_us`` is the arrival time (epoch µs);
    ``duration_us`` the logged processing time when the format has it. ``host`` is the
    request's host (and port), lower case, when known.
    """

    method: str
    target: str
    ts_us: int | None = None
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    status: int | None = None
    response_bytes: int | None = None
    host: str | None = None
    duration_us: int | None = None


# --- pieces shared by the parsers -----------------------------------------------------------


def _to_bytes(text: str) -> bytes:
    # Lines are decoded with surrogateescape, so raw non-UTF-8 bytes come back unchanged.
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raise BadLineError("bad encoding", "text that is not valid Unicode") from None


def _to_text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _percent_encode_unsafe(data: bytes) -> str:
    if not any(b in _UNSAFE_TARGET_BYTES for b in data):
        return data.decode("ascii")
    return "".join(f"%{b:02X}" if b in _UNSAFE_TARGET_BYTES else chr(b) for b in data)


def _split_absolute(data: bytes) -> tuple[str, bytes] | None:
    """``http://user@Host:8080/p?q`` -> (``host:8080``, ``/p?q``); None if not absolute."""
    m = _ABSOLUTE.fullmatch(data)
    if m is None:
        return None
    authority = m.group(1).rpartition(b"@")[2]  # never keep credentials
    rest = m.group(2)
    if not rest.startswith(b"/"):
        rest = b"/" + rest
    return _to_text(authority).lower(), rest


def _target(raw: bytes, *, decoded: bool = False) -> tuple[str, str | None]:
    """A request target -> (trace path, host from an absolute URL).

    ``decoded`` targets (nginx ``$uri``) may hold spaces and control bytes, which are
    percent-encoded; in a raw target they mean the line is not an HTTP request.
    """
    host = None
    absolute = _split_absolute(raw)
    if absolute is not None:
        host, raw = absolute
    if not raw.startswith(b"/"):
        shown = _to_text(raw[:40])
        raise BadLineError("not replayable", f"request target {shown!r} is not a path or URL")
    if not decoded and any(b in _CONTROL_BYTES for b in raw):
        raise BadLineError("not an HTTP request", "control characters in the request target")
    return _percent_encode_unsafe(raw), host or None


def _parse_request_line(raw: bytes) -> tuple[str, str, str | None]:
    """``GET /a?b HTTP/1.1`` -> (method, target, host if absolute-form)."""
    m = _REQUEST_LINE.fullmatch(raw)
    if m is None:
        shown = _to_text(raw[:60]) if raw else "(empty)"
        raise BadLineError("not an HTTP request", f"request line {shown!r}")
    method = m.group(1).decode("ascii")
    target, host = _target(m.group(2))
    return method, target, host


def _unescape_log(data: bytes) -> bytes:
    """nginx (``\\xHH``) and Apache (``\\"``, ``\\\\``, ``\\n``, ...) log escapes -> bytes."""
    if b"\\" not in data:
        return data

    def one(m: re.Match[bytes]) -> bytes:
        esc = m.group(1)
        if esc.startswith(b"x") and len(esc) == 3:
            return bytes([int(esc[1:], 16)])
        if esc in (b'"', b"\\"):
            return esc
        return _C_ESCAPES.get(esc, b"\\" + esc)

    return _ESCAPE.sub(one, data)


def _escape_log(data: bytes) -> str:
    """The inverse of :func:`_unescape_log`, nginx style: ``"``, ``\\`` and non-printables."""
    return "".join(
        chr(b) if 0x20 <= b < 0x7F and b not in (0x22, 0x5C) else f"\\x{b:02X}" for b in data
    )


def _clf_time_us(text: str) -> int:
    """``10/Oct/2000:13:55:36 -0700`` -> epoch µs."""
    m = _CLF_TIME.fullmatch(text)
    if m is None or m.group(2) not in _MONTHS:
        raise BadLineError("bad timestamp", f"[{text[:40]}] is not dd/Mon/yyyy:HH:MM:SS +zzzz")
    day, _, year, hour, minute, second, sign, off_h, off_m = m.groups()
    return _epoch_us(
        int(year),
        _MONTHS[m.group(2)],
        int(day),
        int(hour),
        int(minute),
        int(second),
        0,
        (1 if sign == "+" else -1) * (int(off_h) * 60 + int(off_m)),
        text,
    )


def _epoch_us(
    year: int,
    month: int,
    day: int,
    hour: int,
    minute: int,
    second: int,
    micro: int,
    offset_min: int,
    text: str,
) -> int:
    days_in_month = calendar.monthrange(year, month)[1] if 1 <= month <= 12 and year >= 1 else 0
    if not (
        1 <= day <= days_in_month
        and hour <= 23
        and minute <= 59
        and second <= 60
        and abs(offset_min) < 24 * 60
    ):
        raise BadLineError("bad timestamp", f"{text[:40]!r} is not a valid date and time")
    seconds = calendar.timegm((year, month, day, hour, minute, second)) - offset_min * 60
    ts_us = seconds * 1_000_000 + micro
    if ts_us < 0:
        raise BadLineError("bad timestamp", f"{text[:40]!r} is before 1970")
    return ts_us


def parse_iso8601_us(text: str) -> int:
    """``2024-03-05T10:15:30.123+01:00`` -> epoch µs (digits past µs are cut; no zone = UTC)."""
    m = _ISO_TIME.fullmatch(text.strip())
    if m is None:
        raise BadLineError("bad timestamp", f"{text[:40]!r} is not an ISO 8601 date and time")
    year, month, day, hour, minute, second, frac, _z, sign, off_h, off_m = m.groups()
    micro = int((frac or "")[:6].ljust(6, "0"))
    offset = 0
    if sign is not None:
        offset = (1 if sign == "+" else -1) * (int(off_h) * 60 + int(off_m))
    return _epoch_us(
        int(year), int(month), int(day), int(hour), int(minute), int(second), micro, offset, text
    )


def _seconds_us(value: Json, what: str) -> int:
    """Decimal seconds (``"1700000000.123"``, ``0.004``) -> µs, cut at the µs."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise BadLineError("bad timestamp", f"{what}: expected seconds, got {value!r}"[:120])
    try:
        number = Decimal(str(value).strip())
    except InvalidOperation:
        raise BadLineError(
            "bad timestamp", f"{what}: {str(value)[:40]!r} is not a number"
        ) from None
    if not number.is_finite() or number < 0 or number.adjusted() >= 13:
        raise BadLineError("bad timestamp", f"{what}: {str(value)[:40]!r} is out of range")
    return int((number * 1_000_000).to_integral_value(rounding=ROUND_FLOOR))


def _format_seconds(us: int) -> str:
    return f"{us // 1_000_000}.{us % 1_000_000:06d}"


def _int_field(value: Json, what: str, *, max_value: int) -> int | None:
    if value is None or value in ("", "-"):
        return None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 20:
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= max_value:
        return value
    raise BadLineError(
        "bad field", f"{what}: expected an integer from 0 to {max_value}, got {value!r}"[:120]
    )


def _check_method(method: Json) -> str:
    if not (isinstance(method, str) and _TOKEN.fullmatch(method)):
        raise BadLineError("not an HTTP request", f"method {str(method)[:40]!r} is not a token")
    return method


# --- combined log format --------------------------------------------------------------------


def parse_combined_line(line: str) -> LogEntry:
    """One combined (or common) log format line -> :class:`LogEntry`; :class:`BadLineError`."""
    text = line.rstrip("\r\n")
    start = text.find(" [")
    m = _COMBINED_REST.fullmatch(text, start + 1) if start > 0 else None
    if m is None:
        raise BadLineError("malformed line", 'not %h %l %u [%t] "%r" %>s %b "referer" "user-agent"')
    time_text, request, status, size, referer, agent = m.groups()
    ts_us = _clf_time_us(time_text)
    method, target, host = _parse_request_line(_unescape_log(_to_bytes(request)))
    headers = []
    for name, raw in (("referer", referer), ("user-agent", agent)):
        if raw is not None and raw not in ("", "-"):
            headers.append((name, _to_text(_unescape_log(_to_bytes(raw)))))
    return LogEntry(
        method=method,
        target=target,
        ts_us=ts_us,
        headers=tuple(headers),
        status=None if status == "-" else int(status),
        response_bytes=None if size == "-" else int(size),
        host=host,
    )


def format_combined_line(entry: LogEntry, *, remote_addr: str = "203.0.113.7") -> str:
    """A combined log line as nginx writes it (time in UTC, escapes as ``\\xHH``)."""
    y, mo, d, h, mi, s = time.gmtime((entry.ts_us or 0) // 1_000_000)[:6]
    when = f"{d:02d}/{_MONTH_NAMES[mo]}/{y:04d}:{h:02d}:{mi:02d}:{s:02d} +0000"
    target = entry.target if entry.host is None else f"http://{entry.host}{entry.target}"
    request = _escape_log(f"{entry.method} {target} HTTP/1.1".encode())
    found = dict(entry.headers)
    referer = _escape_log(found["referer"].encode()) if found.get("referer") else "-"
    agent = _escape_log(found["user-agent"].encode()) if found.get("user-agent") else "-"
    status = "-" if entry.status is None else f"{entry.status:03d}"
    size = "-" if entry.response_bytes is None else str(entry.response_bytes)
    return f'{remote_addr} - - [{when}] "{request}" {status} {size} "{referer}" "{agent}"'


# --- JSON lines (nginx escape=json) ---------------------------------------------------------

_TIME_KEYS_LOGGED_AT_END = ("msec", "time_iso8601", "time_local")
_REFERER_KEYS = ("http_referer", "http_referrer", "referer", "referrer")
_AGENT_KEYS = ("http_user_agent", "user_agent", "agent")
_HOST_KEYS = ("host", "http_host", "server_name")


def _first(obj: dict[str, Json], keys: Sequence[str]) -> tuple[str, Json] | None:
    for key in keys:
        value = obj.get(key)
        if value is not None and value not in ("", "-"):
            return key, value
    return None


def _json_time_us(obj: dict[str, Json]) -> tuple[int | None, bool]:
    """(µs, whether it is nginx's log-write time, i.e. the end of the request)."""
    if "ts_us" in obj and obj["ts_us"] is not None:
        ts = obj["ts_us"]
        if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
            raise BadLineError("bad timestamp", f"ts_us: expected integer µs, got {ts!r}"[:120])
        return ts, False
    found = _first(obj, ("msec", "time_iso8601", "time_local", "timestamp", "@timestamp", "time"))
    if found is None:
        return None, False
    key, value = found
    at_end = key in _TIME_KEYS_LOGGED_AT_END
    if key == "time_local" and isinstance(value, str):
        return _clf_time_us(value.strip("[]")), at_end
    if (
        key == "msec"
        or isinstance(value, int | float)
        or (isinstance(value, str) and _DECIMAL.fullmatch(value))
    ):
        return _seconds_us(value, key), at_end
    if isinstance(value, str):
        return parse_iso8601_us(value), at_end
    raise BadLineError("bad timestamp", f"{key}: expected a time, got {value!r}"[:120])


def _json_headers(obj: dict[str, Json]) -> list[tuple[str, str]]:
    headers: list[tuple[str, str]] = []
    raw = obj.get("headers")
    if isinstance(raw, dict):
        items: list[Json] = [[k, v] for k, v in raw.items()]
    elif isinstance(raw, list):
        items = raw
    elif raw is None:
        items = []
    else:
        raise BadLineError("bad header", "headers: expected an object or [name, value] pairs")
    for pair in items:
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
            raise BadLineError("bad header", "headers: expected [name, value] pairs")
        if isinstance(pair[1], str):
            headers.append((pair[0], _to_text(_to_bytes(pair[1]))))
    seen = {name.lower() for name, _ in headers}
    for key, value in obj.items():
        if key.startswith("http_") and len(key) > 5 and isinstance(value, str | int):
            name = key[5:].replace("_", "-")
            if name == "referrer":
                name = "referer"
            if name not in seen and value not in ("", "-"):
                headers.append((name, _to_text(_to_bytes(str(value)))))
                seen.add(name)
    for name, keys in (("referer", _REFERER_KEYS), ("user-agent", _AGENT_KEYS)):
        found = _first(obj, keys)
        if name not in seen and found is not None and isinstance(found[1], str):
            headers.append((name, _to_text(_to_bytes(found[1]))))
            seen.add(name)
    return headers


def _json_body(obj: dict[str, Json]) -> bytes:
    if obj.get("body_b64") not in (None, ""):
        raw = obj["body_b64"]
        try:
            if not isinstance(raw, str):
                raise ValueError("not a string")
            return base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise BadLineError("bad body", "body_b64: not valid base64") from None
    found = _first(obj, ("request_body", "body"))
    if found is None:
        return b""
    if not isinstance(found[1], str):
        raise BadLineError("bad body", f"{found[0]}: expected text")
    return _to_bytes(found[1])


def _json_request(obj: dict[str, Json]) -> tuple[str, str, str | None]:
    request = obj.get("request")
    if isinstance(request, str) and request not in ("", "-"):
        return _parse_request_line(_to_bytes(request))
    if request in ("", "-"):
        raise BadLineError("not an HTTP request", f"request line {request!r}")
    found_method = _first(obj, ("request_method", "method"))
    if found_method is None:
        raise BadLineError("missing field", "no request, request_method or method")
    method = _check_method(found_method[1])
    found_raw = _first(obj, ("request_uri", "url"))
    if found_raw is not None and isinstance(found_raw[1], str):
        target, host = _target(_to_bytes(found_raw[1]))
        return method, target, host
    found_path = _first(obj, ("uri", "path"))
    if found_path is None or not isinstance(found_path[1], str):
        raise BadLineError("missing field", "no request, request_uri, url, uri or path")
    path = _to_bytes(found_path[1])
    found_query = _first(obj, ("args", "query_string", "query"))
    if found_query is not None and isinstance(found_query[1], str) and b"?" not in path:
        path += b"?" + _to_bytes(found_query[1])
    target, host = _target(path, decoded=found_path[0] == "uri")
    return method, target, host


def parse_json_log_line(line: str) -> LogEntry:
    """One JSON log line (nginx ``escape=json`` or generic keys) -> :class:`LogEntry`."""
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError) as err:
        raise BadLineError("not JSON", str(err)[:120]) from None
    if not isinstance(obj, dict):
        raise BadLineError("not JSON", "expected one JSON object per line")
    method, target, host = _json_request(obj)
    ts_us, at_end = _json_time_us(obj)
    duration_us = None
    if obj.get("request_time") not in (None, "", "-"):
        duration_us = _seconds_us(obj["request_time"], "request_time")
    if ts_us is not None and at_end and duration_us is not None:
        # nginx logs when a request ends; its arrival is request_time earlier.
        ts_us -= duration_us
        if ts_us < 0:
            raise BadLineError("bad timestamp", "the time minus request_time is before 1970")
    found_host = _first(obj, _HOST_KEYS)
    if host is None and found_host is not None and isinstance(found_host[1], str):
        host = found_host[1].lower()
    size = _first(obj, ("body_bytes_sent", "bytes_sent", "bytes"))
    return LogEntry(
        method=method,
        target=target,
        ts_us=ts_us,
        headers=tuple(_json_headers(obj)),
        body=_json_body(obj),
        status=_int_field(obj.get("status"), "status", max_value=999),
        response_bytes=_int_field(
            size[1] if size else None, size[0] if size else "", max_value=2**63
        ),
        host=host,
        duration_us=duration_us,
    )


def format_json_log_line(entry: LogEntry) -> str:
    """A JSON log line with the generic keys, which :func:`parse_json_log_line` reads back."""
    obj: dict[str, Json] = {"request": f"{entry.method} {entry.target} HTTP/1.1"}
    if entry.ts_us is not None:
        obj["ts_us"] = entry.ts_us
    if entry.duration_us is not None:
        obj["request_time"] = _format_seconds(entry.duration_us)
    if entry.status is not None:
        obj["status"] = str(entry.status)
    if entry.response_bytes is not None:
        obj["body_bytes_sent"] = str(entry.response_bytes)
    if entry.host is not None:
        obj["host"] = entry.host
    obj["headers"] = [[name, value] for name, value in entry.headers]
    if entry.body:
        obj["body_b64"] = base64.b64encode(entry.body).decode("ascii")
    return json.dumps(obj, ensure_ascii=False)


# --- HAR 1.2 --------------------------------------------------------------------------------


def _dig(obj: Json, *keys: str) -> Json:
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _har_body(post: Json) -> bytes:
    if post is None:
        return b""
    if not isinstance(post, dict):
        raise BadLineError("bad body", "request.postData: expected an object")
    text = post.get("text")
    if isinstance(text, str) and text:
        if post.get("encoding") == "base64":
            try:
                return base64.b64decode(text, validate=True)
            except (binascii.Error, ValueError):
                raise BadLineError("bad body", "request.postData.text: not valid base64") from None
        return _to_bytes(text)
    params = post.get("params")
    if isinstance(params, list) and params:
        mime = str(post.get("mimeType", "")).split(";")[0].strip().lower()
        if mime != "application/x-www-form-urlencoded":
            raise BadLineError(
                "bad body", f"request.postData has params but no text; {mime!r} cannot be rebuilt"
            )
        pairs = []
        for p in params:
            if not (isinstance(p, dict) and isinstance(p.get("name"), str)):
                raise BadLineError("bad body", "request.postData.params: expected {name, value}")
            raw_value = p.get("value")
            name = urllib.parse.quote_plus(_to_bytes(p["name"]))
            value = urllib.parse.quote_plus(
                _to_bytes(raw_value if isinstance(raw_value, str) else "")
            )
            pairs.append(f"{name}={value}")
        return "&".join(pairs).encode("ascii")
    return b""


def parse_har_entry(entry: Json) -> LogEntry:
    """One ``log.entries[i]`` of a HAR 1.2 file -> :class:`LogEntry`."""
    request = _dig(entry, "request")
    if not isinstance(request, dict):
        raise BadLineError("missing field", "request: expected an object")
    method = _check_method(request.get("method"))
    url = request.get("url")
    if not isinstance(url, str):
        raise BadLineError("missing field", "request.url: expected a URL string")
    absolute = _split_absolute(_to_bytes(url.split("#", 1)[0]))
    if absolute is None:
        raise BadLineError("not replayable", f"request.url {url[:60]!r} is not http(s)")
    host, raw_target = absolute
    target, _ = _target(raw_target, decoded=True)
    started = _dig(entry, "startedDateTime")
    if not isinstance(started, str):
        raise BadLineError("bad timestamp", "startedDateTime: expected an ISO 8601 string")
    headers = []
    raw_headers = request.get("headers") or []
    if not isinstance(raw_headers, list):
        raise BadLineError("bad header", "request.headers: expected a list")
    for h in raw_headers:
        if not (isinstance(h, dict) and isinstance(h.get("name"), str)):
            raise BadLineError("bad header", "request.headers: expected {name, value} objects")
        name, value = h["name"], h.get("value")
        if name.startswith(":"):
            continue  # HTTP/2 pseudo-headers (:authority, :path, ...) are not headers to send
        headers.append((name, _to_text(_to_bytes(value)) if isinstance(value, str) else ""))
    status = _dig(entry, "response", "status")
    size = _dig(entry, "response", "bodySize")
    return LogEntry(
        method=method,
        target=target,
        ts_us=parse_iso8601_us(started),
        headers=tuple(headers),
        body=_har_body(request.get("postData")),
        status=status if type(status) is int and 0 < status <= 999 else None,
        response_bytes=size if type(size) is int and 0 <= size <= 2**63 else None,
        host=host or None,
    )


def format_har_entry(entry: LogEntry) -> dict[str, Json]:
    """A HAR 1.2 entry for ``entry`` (what :func:`parse_har_entry` reads back)."""
    ts = entry.ts_us or 0
    secs, micro = divmod(ts, 1_000_000)
    y, mo, d, h, mi, s = time.gmtime(secs)[:6]
    started = f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}.{micro:06d}Z"
    request: dict[str, Json] = {
        "method": entry.method,
        "url": f"http://{entry.host or ''}{entry.target}",
        "httpVersion": "HTTP/1.1",
        "headers": [{"name": n, "value": v} for n, v in entry.headers],
        "queryString": [],
        "cookies": [],
        "headersSize": -1,
        "bodySize": len(entry.body),
    }
    if entry.body:
        request["postData"] = {
            "mimeType": "application/octet-stream",
            "text": base64.b64encode(entry.body).decode("ascii"),
            "encoding": "base64",
        }
    return {
        "startedDateTime": started,
        "time": 0,
        "request": request,
        "response": {
            "status": entry.status or 0,
            "statusText": "",
            "httpVersion": "HTTP/1.1",
            "headers": [],
            "cookies": [],
            "content": {"size": 0, "mimeType": ""},
            "redirectURL": "",
            "headersSize": -1,
            "bodySize": -1 if entry.response_bytes is None else entry.response_bytes,
        },
        "cache": {},
        "timings": {"send": 0, "wait": 0, "receive": 0},
    }


def _har_entries(text: str, source: str) -> list[tuple[int, Json]]:
    """The entries of a HAR file, each with the line its JSON object starts on."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise DataError(
            f"{source}:{err.lineno}: not valid JSON ({err.msg}, column {err.colno})",
            hint="a HAR file is one JSON document; export it again from the browser",
        ) from None
    except (ValueError, RecursionError) as err:
        raise DataError(f"{source}: not valid JSON ({err})", hint="export it again") from None
    entries = _dig(doc, "log", "entries")
    if not isinstance(entries, list):
        raise DataError(
            f"{source}: not a HAR file: no log.entries list",
            hint="export with the browser's 'Save all as HAR'; for logs use --from nginx/jsonl",
        )
    lines = _entry_lines(text)
    if lines is None or len(lines) != len(entries):
        lines = [0] * len(entries)
    return list(zip(lines, entries, strict=True))


def _entry_lines(text: str) -> list[int] | None:
    """Line numbers where each ``log.entries`` element starts (None if the shape surprises)."""
    decoder = json.JSONDecoder()
    ws = re.compile(r"[ \t\n\r]*")

    def skip(pos: int) -> int:
        m = ws.match(text, pos)
        return m.end() if m else pos

    def find_key(pos: int, key: str) -> int | None:
        # pos is at '{'; returns the position of key's value.
        pos = skip(pos + 1)
        while pos < len(text) and text[pos] == '"':
            name, pos = decoder.raw_decode(text, pos)
            pos = skip(pos)
            if text[pos : pos + 1] != ":":
                return None
            pos = skip(pos + 1)
            if name == key:
                return pos
            _, pos = decoder.raw_decode(text, pos)
            pos = skip(pos)
            if text[pos : pos + 1] == ",":
                pos = skip(pos + 1)
        return None

    try:
        start = skip(0)
        log = find_key(start, "log") if text[start : start + 1] == "{" else None
        if log is None or text[log : log + 1] != "{":
            return None
        pos = find_key(log, "entries")
        if pos is None or text[pos : pos + 1] != "[":
            return None
        pos = skip(pos + 1)
        lines: list[int] = []
        line, counted = 1, 0
        while pos < len(text) and text[pos] != "]":
            line += text.count("\n", counted, pos)
            counted = pos
            lines.append(line)
            _, pos = decoder.raw_decode(text, pos)
            pos = skip(pos)
            if text[pos : pos + 1] == ",":
                pos = skip(pos + 1)
        return lines
    except (ValueError, IndexError, RecursionError):
        return None


# --- from entries to trace requests ---------------------------------------------------------


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
                raise DataError(f"{where}: {err.reason}: {err.detail}", hint=_SKIP_HINT) from None
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
    for index, (line_no, entry) in enumerate(_har_entries(text, source), start=1):
        url = _dig(entry, "request", "url")
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
