"""The combined log format of nginx and Apache (``--from combined``, ``nginx``, ``apache``).

``%h %l %u %t "%r" %>s %b "%{Referer}i" "%{User-Agent}i"`` (and the common log format,
without the last two fields). Method, target and a timestamp in whole seconds; the only
headers are the referer and user agent, kept with ``keep_headers``. nginx escapes ``"`` as
``\\x22``, Apache as ``\\"``; both are read.
"""

from __future__ import annotations

import re
import time

from hairline.trace.importers.entry import (
    BadLineError,
    LogEntry,
    epoch_us,
    parse_request_line,
    to_bytes,
    to_text,
)

__all__ = ["clf_time_us", "format_combined_line", "parse_combined_line"]

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
_ESCAPE = re.compile(rb"\\(x[0-9A-Fa-f]{2}|.)", re.DOTALL)
_C_ESCAPES = {b"n": b"\n", b"t": b"\t", b"r": b"\r", b"v": b"\x0b", b"f": b"\x0c"}


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


def clf_time_us(text: str) -> int:
    """``10/Oct/2000:13:55:36 -0700`` -> epoch µs."""
    m = _CLF_TIME.fullmatch(text)
    if m is None or m.group(2) not in _MONTHS:
        raise BadLineError("bad timestamp", f"[{text[:40]}] is not dd/Mon/yyyy:HH:MM:SS +zzzz")
    day, _, year, hour, minute, second, sign, off_h, off_m = m.groups()
    return epoch_us(
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


def parse_combined_line(line: str) -> LogEntry:
    """One combined (or common) log format line -> :class:`LogEntry`; :class:`BadLineError`."""
    text = line.rstrip("\r\n")
    start = text.find(" [")
    m = _COMBINED_REST.fullmatch(text, start + 1) if start > 0 else None
    if m is None:
        raise BadLineError("malformed line", 'not %h %l %u [%t] "%r" %>s %b "referer" "user-agent"')
    time_text, request, status, size, referer, agent = m.groups()
    ts_us = clf_time_us(time_text)
    method, target, host = parse_request_line(_unescape_log(to_bytes(request)))
    headers = []
    for name, raw in (("referer", referer), ("user-agent", agent)):
        if raw is not None and raw not in ("", "-"):
            headers.append((name, to_text(_unescape_log(to_bytes(raw)))))
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
