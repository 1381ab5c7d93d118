"""JSON access logs (``--from jsonl``, ``nginx-json``): one JSON object per line.

As nginx writes with ``log_format NAME escape=json '{...}'``. Keys are nginx variable names
(``msec``, ``request``, ``status``, ``http_user_agent``, ``request_body``, ...) or the
generic ones listed in docs/traffic.md.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Sequence
from decimal import ROUND_FLOOR, Decimal, InvalidOperation

from hairline.trace.format import Json
from hairline.trace.importers.combined import clf_time_us
from hairline.trace.importers.entry import (
    BadLineError,
    LogEntry,
    check_method,
    parse_iso8601_us,
    parse_request_line,
    parse_target,
    to_bytes,
    to_text,
)

__all__ = ["format_json_log_line", "parse_json_log_line"]

_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]+)?")
_TIME_KEYS_LOGGED_AT_END = ("msec", "time_iso8601", "time_local")
_REFERER_KEYS = ("http_referer", "http_referrer", "referer", "referrer")
_AGENT_KEYS = ("http_user_agent", "user_agent", "agent")
_HOST_KEYS = ("host", "http_host", "server_name")


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
        return clf_time_us(value.strip("[]")), at_end
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
            headers.append((pair[0], to_text(to_bytes(pair[1]))))
    seen = {name.lower() for name, _ in headers}
    for key, value in obj.items():
        if key.startswith("http_") and len(key) > 5 and isinstance(value, str | int):
            name = key[5:].replace("_", "-")
            if name == "referrer":
                name = "referer"
            if name not in seen and value not in ("", "-"):
                headers.append((name, to_text(to_bytes(str(value)))))
                seen.add(name)
    for name, keys in (("referer", _REFERER_KEYS), ("user-agent", _AGENT_KEYS)):
        found = _first(obj, keys)
        if name not in seen and found is not None and isinstance(found[1], str):
            headers.append((name, to_text(to_bytes(found[1]))))
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
    return to_bytes(found[1])


def _json_request(obj: dict[str, Json]) -> tuple[str, str, str | None]:
    request = obj.get("request")
    if isinstance(request, str) and request not in ("", "-"):
        return parse_request_line(to_bytes(request))
    if request in ("", "-"):
        raise BadLineError("not an HTTP request", f"request line {request!r}")
    found_method = _first(obj, ("request_method", "method"))
    if found_method is None:
        raise BadLineError("missing field", "no request, request_method or method")
    method = check_method(found_method[1])
    found_raw = _first(obj, ("request_uri", "url"))
    if found_raw is not None and isinstance(found_raw[1], str):
        target, host = parse_target(to_bytes(found_raw[1]))
        return method, target, host
    found_path = _first(obj, ("uri", "path"))
    if found_path is None or not isinstance(found_path[1], str):
        raise BadLineError("missing field", "no request, request_uri, url, uri or path")
    path = to_bytes(found_path[1])
    found_query = _first(obj, ("args", "query_string", "query"))
    if found_query is not None and isinstance(found_query[1], str) and b"?" not in path:
        path += b"?" + to_bytes(found_query[1])
    target, host = parse_target(path, decoded=found_path[0] == "uri")
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
