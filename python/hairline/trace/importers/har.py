"""HAR 1.2 (``--from har``): a browser's or proxy's export.

Everything a request carries: method, URL, headers, body (``postData``), start time with
milliseconds. Each entry is told by the line its JSON object starts on.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
import urllib.parse

from hairline.errors import DataError
from hairline.trace.format import Json
from hairline.trace.importers.entry import (
    BadLineError,
    LogEntry,
    check_method,
    parse_iso8601_us,
    parse_target,
    split_absolute,
    to_bytes,
    to_text,
)

__all__ = ["dig", "format_har_entry", "har_entries", "parse_har_entry"]


def dig(obj: Json, *keys: str) -> Json:
    """``obj[keys[0]][keys[1]]...``, or None where a level is not an object."""
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
        return to_bytes(text)
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
            name = urllib.parse.quote_plus(to_bytes(p["name"]))
            value = urllib.parse.quote_plus(
                to_bytes(raw_value if isinstance(raw_value, str) else "")
            )
            pairs.append(f"{name}={value}")
        return "&".join(pairs).encode("ascii")
    return b""


def parse_har_entry(entry: Json) -> LogEntry:
    """One ``log.entries[i]`` of a HAR 1.2 file -> :class:`LogEntry`."""
    request = dig(entry, "request")
    if not isinstance(request, dict):
        raise BadLineError("missing field", "request: expected an object")
    method = check_method(request.get("method"))
    url = request.get("url")
    if not isinstance(url, str):
        raise BadLineError("missing field", "request.url: expected a URL string")
    absolute = split_absolute(to_bytes(url.split("#", 1)[0]))
    if absolute is None:
        raise BadLineError("not replayable", f"request.url {url[:60]!r} is not http(s)")
    host, raw_target = absolute
    target, _ = parse_target(raw_target, decoded=True)
    started = dig(entry, "startedDateTime")
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
        headers.append((name, to_text(to_bytes(value)) if isinstance(value, str) else ""))
    status = dig(entry, "response", "status")
    size = dig(entry, "response", "bodySize")
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


def har_entries(text: str, source: str) -> list[tuple[int, Json]]:
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
    entries = dig(doc, "log", "entries")
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
