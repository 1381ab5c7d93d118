"""What every importer's parser makes and refuses, and the pieces the parsers share.

A parser turns one record into a :class:`LogEntry`, or raises :class:`BadLineError` for a
record that is not a replayable HTTP request (``"-"``, TLS bytes sent to a plain-text port, a
truncated line, a bad timestamp). The shared pieces read request targets and request lines
(bytes a trace path may not hold are percent-encoded, credentials in a URL never kept), ISO
8601 and calendar times, and methods.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass

from hairline.errors import DataError
from hairline.trace.format import Json

__all__ = [
    "SKIP_HINT",
    "BadLineError",
    "LogEntry",
    "check_method",
    "epoch_us",
    "parse_iso8601_us",
    "parse_request_line",
    "parse_target",
    "split_absolute",
    "to_bytes",
    "to_text",
]

SKIP_HINT = "fix or delete that line, or pass --skip-bad to skip bad lines and count them by reason"
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
# Bytes a trace path may not hold as they are (docs/trace-format.md): percent-encoded.
_UNSAFE_TARGET_BYTES = frozenset(range(0x21)) | {0x7F} | frozenset(range(0x80, 0x100))
_CONTROL_BYTES = frozenset(range(0x20)) | {0x7F}


class BadLineError(DataError):
    """A record that is not a replayable HTTP request; ``reason`` is a short counting key."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}", hint=SKIP_HINT)
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


def to_bytes(text: str) -> bytes:
    # Lines are decoded with surrogateescape, so raw non-UTF-8 bytes come back unchanged.
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raise BadLineError("bad encoding", "text that is not valid Unicode") from None


def to_text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _percent_encode_unsafe(data: bytes) -> str:
    if not any(b in _UNSAFE_TARGET_BYTES for b in data):
        return data.decode("ascii")
    return "".join(f"%{b:02X}" if b in _UNSAFE_TARGET_BYTES else chr(b) for b in data)


def split_absolute(data: bytes) -> tuple[str, bytes] | None:
    """``http://user@Host:8080/p?q`` -> (``host:8080``, ``/p?q``); None if not absolute."""
    m = _ABSOLUTE.fullmatch(data)
    if m is None:
        return None
    authority = m.group(1).rpartition(b"@")[2]  # never keep credentials
    rest = m.group(2)
    if not rest.startswith(b"/"):
        rest = b"/" + rest
    return to_text(authority).lower(), rest


def parse_target(raw: bytes, *, decoded: bool = False) -> tuple[str, str | None]:
    """A request target -> (trace path, host from an absolute URL).

    ``decoded`` targets (nginx ``$uri``) may hold spaces and control bytes, which are
    percent-encoded; in a raw target they mean the line is not an HTTP request.
    """
    host = None
    absolute = split_absolute(raw)
    if absolute is not None:
        host, raw = absolute
    if not raw.startswith(b"/"):
        shown = to_text(raw[:40])
        raise BadLineError("not replayable", f"request target {shown!r} is not a path or URL")
    if not decoded and any(b in _CONTROL_BYTES for b in raw):
        raise BadLineError("not an HTTP request", "control characters in the request target")
    return _percent_encode_unsafe(raw), host or None


def parse_request_line(raw: bytes) -> tuple[str, str, str | None]:
    """``GET /a?b HTTP/1.1`` -> (method, target, host if absolute-form)."""
    m = _REQUEST_LINE.fullmatch(raw)
    if m is None:
        shown = to_text(raw[:60]) if raw else "(empty)"
        raise BadLineError("not an HTTP request", f"request line {shown!r}")
    method = m.group(1).decode("ascii")
    target, host = parse_target(m.group(2))
    return method, target, host


def epoch_us(
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
    """A date and time at a UTC offset (minutes) -> epoch µs; ``text`` is what was read."""
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
    return epoch_us(
        int(year), int(month), int(day), int(hour), int(minute), int(second), micro, offset, text
    )


def check_method(method: Json) -> str:
    if not (isinstance(method, str) and _TOKEN.fullmatch(method)):
        raise BadLineError("not an HTTP request", f"method {str(method)[:40]!r} is not a token")
    return method
