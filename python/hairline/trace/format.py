"""The trace format (docs/trace-format.md): read it exactly as the engine does, write it safely.

A trace is JSONL: a header line ``{"hairline_trace": 1, ...}``, then one request per line.
:func:`read_trace` accepts exactly what ``hairline-engine load --trace`` accepts (the Rust
reader is ``engine/src/format/trace.rs``) and rejects everything else with the engine's kind
of message, ``file:line: field: problem``, so a trace that passes here never stops a run.
That includes the corners of JSON where Python's :mod:`json` is more lenient than Rust's
serde_json: ``NaN``, numbers out of range, lone surrogates, nesting deeper than 127, ``-0``
(a float to serde_json, so not a ``ts_us``) and booleans where integers are expected.

:func:`write_trace` writes atomically (a temporary file renamed into place) and checks every
request with the same rules before writing, so no tool here can produce a trace the engine
would refuse. Like the engine's outputs, a trace is created with mode 0666 less the umask,
and only in a folder that exists.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

from hairline.errors import DataError
from hairline.kit.atomic import atomic_path

__all__ = [
    "ENGINE_HEADERS",
    "LABELS_HINT",
    "MAX_ENDPOINTS",
    "REQUEST_FIELDS",
    "TRACE_VERSION",
    "Json",
    "Trace",
    "TraceRequest",
    "check_output_path",
    "encode_request",
    "encode_trace",
    "header_problem",
    "parse_trace_text",
    "path_without_query",
    "read_trace",
    "request_problem",
    "write_trace",
]

TRACE_VERSION = 1
REQUEST_FIELDS = (
    "method",
    "path",
    "headers",
    "body_b64",
    "endpoint",
    "ts_us",
    "key",
    "id",
    "meta",
)
#: Headers the engine writes itself; recorded ones are dropped (docs/trace-format.md).
ENGINE_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "x-hairline-request-id"}
)

#: Distinct endpoint labels the engine keeps statistics for (a u16 index in its records).
MAX_ENDPOINTS = 65_535
#: What to do about too many labels, for every message that says so.
LABELS_HINT = (
    "label fewer endpoints: --normalize-ids turns ids in paths into :id, and "
    "--label REGEX=NAME names a group of paths (docs/traffic.md, 'Labelling')"
)

#: Any JSON value (what ``id``, ``meta`` and free header fields hold).
Json: TypeAlias = Any

_FORMAT_HINT = "docs/trace-format.md defines each field; fix the writer or drop that line"
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# Rust's str::trim removes Unicode White_Space; Python's str.strip also removes U+001C..U+001F.
_RUST_WHITESPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_PATH = re.compile(r"/[^\x00-\x20\x7f]*")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
# Control characters but tab (RFC 9110 field-value), as the engine's is_header_value.
_HEADER_VALUE_BAD = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
TOKEN_RULE = "a name is a token: letters, digits and !#$%&'*+-.^_`|~"
# serde_json refuses the 128th level of nesting (the line's object is level 1).
_MAX_DEPTH = 127
_U64_MAX = 2**64 - 1
_I64_MIN = -(2**63)


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace.

    ``endpoint`` is the label written in the file; ``None`` means the engine's default, the
    path without its query (see :attr:`label`). ``key`` is text: integer keys are read as
    their decimal text, as the engine does. ``headers`` keep their order; the object form of
    the file is read in the engine's order (sorted by name).
    """

    path: str
    method: str = "GET"
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    endpoint: str | None = None
    ts_us: int | None = None
    key: str | None = None
    id: Json = None
    meta: Json = None

    @property
    def label(self) -> str:
        """The endpoint label the engine uses for this request."""
        return self.endpoint if self.endpoint is not None else path_without_query(self.path)


@dataclass(frozen=True)
class Trace:
    """A parsed trace: its header object and its requests in file order."""

    header: dict[str, Json]
    requests: list[TraceRequest] = field(default_factory=list)


def path_without_query(path: str) -> str:
    """``/a/b?x=1`` -> ``/a/b``: the engine's default endpoint label."""
    return path.split("?", 1)[0]


class _Problem(Exception):
    """One bad field of one line; the caller adds the file and line."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def _bad_line(source: str, line_no: int, problem: _Problem) -> DataError:
    return DataError(f"{source}:{line_no}: {problem.field}: {problem.message}", hint=_FORMAT_HINT)


# --- JSON as serde_json reads it -------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError("number out of range")
    return value


def _parse_int(text: str) -> int | float:
    # serde_json keeps integers that fit u64 (or i64 when negative); others become floats,
    # and "-0" is the float -0.0. Short-circuit on length so huge literals never become ints.
    if len(text) <= 20:
        value = int(text)
        if text.startswith("-"):
            if value == 0:
                return -0.0
            if value >= _I64_MIN:
                return value
        elif value <= _U64_MAX:
            return value
    return _parse_float(text)


def _loads(text: str) -> Json:
    """``json.loads`` with serde_json's rules; raises ``_Problem("json", ...)``."""
    try:
        value = json.loads(
            text,
            parse_constant=_reject_constant,
            parse_float=_parse_float,
            parse_int=_parse_int,
        )
    except RecursionError:
        raise _Problem("json", "not valid JSON (recursion limit exceeded)") from None
    except ValueError as err:
        raise _Problem("json", f"not valid JSON ({err})") from None
    problem = _json_value_problem(value)
    if problem is not None:
        raise _Problem("json", f"not valid JSON ({problem})")
    return value


def _json_value_problem(value: Json) -> str | None:
    """What serde_json would refuse in an already parsed value, or ``None``."""
    return _problem_in(value, 1)


def _problem_in(item: Json, depth: int) -> str | None:
    # Exact types first: every request is checked on reading and on writing, and this walk
    # was a quarter of importing a large log (isinstance on each value, a tuple per key).
    # Recursion stops at _MAX_DEPTH, far inside Python's own limit.
    kind = type(item)
    if kind is str:
        # isascii() is a flag read; most strings are ASCII and need no search.
        if item.isascii() or not _SURROGATE.search(item):  # type: ignore[union-attr]
            return None
        return "a lone UTF-16 surrogate in a string"
    if kind is dict:
        if depth > _MAX_DEPTH:
            return "recursion limit exceeded"
        for k, v in item.items():  # type: ignore[union-attr]
            if not isinstance(k, str):
                return "object keys must be strings"
            problem = _problem_in(k, depth) or _problem_in(v, depth + 1)
            if problem is not None:
                return problem
        return None
    if kind is list:
        if depth > _MAX_DEPTH:
            return "recursion limit exceeded"
        for v in item:  # type: ignore[union-attr]
            problem = _problem_in(v, depth + 1)
            if problem is not None:
                return problem
        return None
    if item is None or isinstance(item, bool):
        return None
    if isinstance(item, int):
        # serde_json would read a larger integer as a float: not the value written.
        return (
            None if _I64_MIN <= item <= _U64_MAX else f"integer {item} is outside the 64-bit range"
        )
    if isinstance(item, float):
        return None if math.isfinite(item) else "NaN and infinities are not JSON numbers"
    if isinstance(item, str | dict | list):  # subclasses: walked as their base is
        base: type = str if isinstance(item, str) else dict if isinstance(item, dict) else list
        return _problem_in(base(item), depth)
    return f"{type(item).__name__} is not a JSON value"


def _is_u64(value: Json) -> bool:
    return type(value) is int and 0 <= value <= _U64_MAX


# --- one request ----------------------------------------------------------------------------


def header_problem(name: str, value: str) -> str | None:
    """What keeps a header from going on the wire as it is (``None`` when it can): the
    engine's rule (``header_problem`` in engine/src/format/trace.rs), for every reader and
    writer."""
    if not _TOKEN.fullmatch(name):
        return f"invalid header name {json.dumps(name)}; {TOKEN_RULE}"
    if _HEADER_VALUE_BAD.search(value):
        return (
            f"header {json.dumps(name)} has a control character in its value; only tab is allowed"
        )
    return None


def _check_header_pair(name: str, value: str) -> tuple[str, str]:
    problem = header_problem(name, value)
    if problem is not None:
        raise _Problem("headers", problem)
    return name, value


def _headers_from_json(raw: Json) -> tuple[tuple[str, str], ...]:
    shape = "expected an object or a list of [name, value] string pairs"
    if raw is None:
        return ()
    if isinstance(raw, dict):
        pairs = []
        # serde_json's map is ordered by name, and the engine checks and sends in that order.
        for name in sorted(raw):
            value = raw[name]
            if not isinstance(value, str):
                raise _Problem("headers", "header values must be strings")
            pairs.append(_check_header_pair(name, value))
        return tuple(pairs)
    if isinstance(raw, list):
        out = []
        for pair in raw:
            if not (
                isinstance(pair, list)
                and len(pair) == 2
                and isinstance(pair[0], str)
                and isinstance(pair[1], str)
            ):
                raise _Problem("headers", shape)
            out.append(_check_header_pair(pair[0], pair[1]))
        return tuple(out)
    raise _Problem("headers", shape)


def _decode_body(raw: Json) -> bytes:
    if raw is None:
        return b""
    if not isinstance(raw, str):
        raise _Problem("body_b64", "expected a base64 string")
    try:
        body = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError) as err:
        raise _Problem("body_b64", f"not valid standard base64 ({err})") from None
    # The engine's decoder also refuses padding-free and non-canonical encodings.
    if base64.b64encode(body).decode("ascii") != raw:
        raise _Problem("body_b64", "not valid standard base64 (not canonical: bad padding or bits)")
    return body


def _request_from_json(obj: dict[str, Json]) -> TraceRequest:
    unknown = sorted(k for k in obj if k not in REQUEST_FIELDS)
    if unknown:
        raise _Problem(unknown[0], f"unknown field; the fields are {', '.join(REQUEST_FIELDS)}")
    method = obj.get("method", "GET")
    if not (isinstance(method, str) and _TOKEN.fullmatch(method)):
        raise _Problem("method", 'expected an HTTP method such as "GET"')
    if "path" not in obj:
        raise _Problem("path", "missing; every request needs a path with its query")
    path = obj["path"]
    if not isinstance(path, str):
        raise _Problem("path", 'expected a string such as "/api/feed?user=1"')
    if not _PATH.fullmatch(path):
        raise _Problem(
            "path",
            "expected a path starting with '/' without spaces or control characters, "
            'e.g. "/api/feed?user=1" (percent-encode spaces)',
        )
    headers = _headers_from_json(obj.get("headers"))
    body = _decode_body(obj.get("body_b64"))
    endpoint = obj.get("endpoint")
    if endpoint is not None and not (isinstance(endpoint, str) and endpoint):
        raise _Problem("endpoint", "expected a non-empty string label")
    ts_us = obj.get("ts_us")
    if ts_us is not None and not _is_u64(ts_us):
        raise _Problem("ts_us", "expected a non-negative integer (microseconds)")
    key = obj.get("key")
    if key is not None:
        if isinstance(key, bool) or not isinstance(key, str | int | float):
            raise _Problem("key", "expected a string or an integer")
        key = key if isinstance(key, str) else str(key)
    return TraceRequest(
        path=path,
        method=method,
        headers=headers,
        body=body,
        endpoint=endpoint,
        ts_us=ts_us,
        key=key,
        id=obj.get("id"),
        meta=obj.get("meta"),
    )


def _check_header_object(obj: dict[str, Json]) -> None:
    if "hairline_trace" not in obj:
        raise _Problem(
            "hairline_trace", 'the first line must be the header {"hairline_trace": 1, ...}'
        )
    version = obj["hairline_trace"]
    if not (type(version) is int and version == TRACE_VERSION):
        raise _Problem(
            "hairline_trace",
            f"unsupported trace version {json.dumps(version)}; "
            f"this engine reads version {TRACE_VERSION}",
        )


def _request_to_json(request: TraceRequest) -> dict[str, Json]:
    obj: dict[str, Json] = {}
    if request.method != "GET":
        obj["method"] = request.method
    obj["path"] = request.path
    if request.endpoint is not None:
        obj["endpoint"] = request.endpoint
    if request.ts_us is not None:
        obj["ts_us"] = request.ts_us
    if request.headers:
        # The list form keeps order and repeats; the object form would be sent sorted.
        obj["headers"] = [[name, value] for name, value in request.headers]
    if request.body:
        obj["body_b64"] = base64.b64encode(request.body).decode("ascii")
    if request.key is not None:
        obj["key"] = request.key
    if request.id is not None:
        obj["id"] = request.id
    if request.meta is not None:
        obj["meta"] = request.meta
    return obj


def request_problem(request: TraceRequest) -> str | None:
    """Why the engine would refuse this request (``"field: problem"``), or ``None``."""
    try:
        _encode(request)
    except _Problem as problem:
        return str(problem)
    return None


def _encode(request: TraceRequest) -> str:
    obj = _request_to_json(request)
    problem = _json_value_problem(obj)
    if problem is not None:
        raise _Problem("json", problem)
    _request_from_json(obj)
    return json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def encode_request(request: TraceRequest) -> str:
    """One trace line (no newline); a :class:`DataError` if the engine would refuse it."""
    try:
        return _encode(request)
    except _Problem as problem:
        raise DataError(
            f"cannot write request {request.path!r}: {problem}", hint=_FORMAT_HINT
        ) from None


# --- files ----------------------------------------------------------------------------------


def parse_trace_text(text: str, *, source: str = "<trace>") -> Trace:
    """Parse trace text as the engine does; ``source`` names the file in messages."""
    header: dict[str, Json] | None = None
    requests: list[TraceRequest] = []
    for line_no, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip(_RUST_WHITESPACE)
        if not line:
            continue
        try:
            obj = _loads(line)
            if not isinstance(obj, dict):
                raise _Problem("json", "expected a JSON object")
            if header is None:
                _check_header_object(obj)
                header = obj
                continue
            requests.append(_request_from_json(obj))
        except _Problem as problem:
            raise _bad_line(source, line_no, problem) from None
    if header is None:
        raise _bad_line(
            source,
            1,
            _Problem(
                "hairline_trace",
                'missing header line; the first line must be {"hairline_trace": 1}',
            ),
        )
    if not requests:
        raise DataError(
            f"{source}: the trace has no requests; add one JSON object per line after the header",
            hint=_FORMAT_HINT,
        )
    return Trace(header=header, requests=requests)


def read_trace(path: str | os.PathLike[str]) -> Trace:
    """Read and validate a trace file; a :class:`DataError` names ``file:line: field``."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as err:
        raise DataError(
            f"cannot read trace {p}: {err.strerror or err}", hint="check the path"
        ) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line_no = data.count(b"\n", 0, err.start) + 1
        raise DataError(
            f"{p}:{line_no}: json: not valid UTF-8 (byte {err.start})",
            hint="a trace is UTF-8 text; re-encode the file or fix its writer",
        ) from None
    return parse_trace_text(text, source=str(p))


def check_output_path(path: Path) -> None:
    """A :class:`DataError` unless ``path`` can be written: its folder must exist, and it must
    not be a folder. Missing folders are not made, as the engine and the recorder do not
    make them: a typo in a path should not make a tree of folders."""
    if path.is_dir():
        raise DataError(f"cannot write {path}: it is a directory", hint="give a file path")
    parent = path.parent
    if not parent.is_dir():
        raise DataError(
            f"cannot write {path}: the directory {parent} does not exist",
            hint="create it or write elsewhere",
        )


def encode_trace(
    header: Mapping[str, Json] | None, requests: Iterable[TraceRequest], *, target: str
) -> str:
    """A trace's text (JSONL); every request is checked first. ``target`` names where it
    goes, for the errors.

    ``header`` holds free-form provenance (``source``, ``created``, ...); its
    ``hairline_trace`` version is set here. An empty trace, and one with more than
    :data:`MAX_ENDPOINTS` labels, are refused, as the engine refuses to replay them.
    """
    head: dict[str, Json] = {"hairline_trace": TRACE_VERSION}
    head.update({k: v for k, v in (header or {}).items() if k != "hairline_trace"})
    problem = _json_value_problem(head)
    if problem is not None:
        raise DataError(f"cannot write the trace header: {problem}", hint=_FORMAT_HINT)
    lines = [json.dumps(head, ensure_ascii=False, allow_nan=False, separators=(",", ":"))]
    labels: set[str] = set()
    for r in requests:
        lines.append(encode_request(r))
        labels.add(r.label)
        if len(labels) > MAX_ENDPOINTS:
            raise DataError(
                f"cannot write {target}: more than {MAX_ENDPOINTS:,} endpoint labels, which the "
                f"engine refuses to replay (the {MAX_ENDPOINTS + 1:,}th is {r.label!r})",
                hint=LABELS_HINT,
            )
    if len(lines) == 1:
        raise DataError(
            f"nothing to write to {target}: no requests are left",
            hint="the engine cannot replay an empty trace; loosen the filter or sample",
        )
    return "\n".join(lines) + "\n"


def write_trace(
    path: str | os.PathLike[str],
    header: Mapping[str, Json] | None,
    requests: Iterable[TraceRequest],
) -> Path:
    """Write a trace atomically (:func:`encode_trace`'s text). Returns the path."""
    p = Path(path)
    text = encode_trace(header, requests, target=str(p))
    check_output_path(p)
    with atomic_path(p) as tmp, tmp.open("w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    return p
