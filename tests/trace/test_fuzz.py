"""Fuzzing every parser (hypothesis, derandomised, a few seconds in all).

Each parser meets three kinds of input: valid records built from the pieces real logs
have, the same records with one field corrupted, and arbitrary text or JSON. Two
properties: a parser raises nothing but :class:`DataError`, and what it accepts
round-trips (formatting the parsed record and parsing it again gives the same record) and
becomes a request the trace reader accepts, or a :class:`DataError`. The trace reader is
also checked against the engine itself on generated traces.

``HAIRLINE_FUZZ_EXAMPLES=N`` turns the short derandomised run into a long random one.
Hypothesis explores branches rather than following weights, so valid and corrupted inputs
are separate top-level branches: a good share of examples reaches the accepting paths
(``--hypothesis-show-statistics`` shows the split).
"""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from hairline.errors import DataError
from hairline.trace.format import encode_request, parse_trace_text, read_trace
from hairline.trace.importers import (
    LogEntry,
    format_combined_line,
    format_har_entry,
    format_json_log_line,
    parse_combined_line,
    parse_har_entry,
    parse_json_log_line,
    to_trace_request,
)
from hairline.trace.labels import Labeller

# HAIRLINE_FUZZ_EXAMPLES=20000 runs a long, randomised search instead of the suite's short,
# derandomised one.
LONG_RUN = int(os.environ.get("HAIRLINE_FUZZ_EXAMPLES", "0"))
FAST = settings(
    max_examples=LONG_RUN or 300,
    derandomize=not LONG_RUN,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
ENGINE_RUNS = settings(FAST, max_examples=LONG_RUN // 20 or 80)
LABELLER = Labeller(normalize_ids=True)
NO_DROP: frozenset[str] = frozenset()
LINE_FIELD = re.compile(r":(\d+): ([^:]+): ")
# Bytes a request target may hold as they are, and non-ASCII ones (percent-encoded).
SAFE_TARGET_BYTES = [b for b in range(0x21, 0x100) if b != 0x7F]

any_text = st.text(alphabet=st.characters(codec=None), max_size=60)
json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    any_text,
)
json_values = st.recursive(
    json_leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(any_text, inner, max_size=3),
    max_leaves=8,
)
good_methods = st.sampled_from(["GET", "POST", "PUT", "DELETE", "HEAD", "M-SEARCH"])
bad_methods = st.sampled_from(["", "G T", "-", "GÉT", "\x16\x03"])
good_targets = st.lists(st.sampled_from(SAFE_TARGET_BYTES), max_size=24).map(
    lambda b: b"/" + bytes(b)
)
bad_targets = st.one_of(
    st.sampled_from([b"*", b"example.com:443", b"/a\x01b", b"-", b""]), st.binary(max_size=16)
)
good_versions = st.sampled_from(["HTTP/1.1", "HTTP/2.0", "HTTP/1.0", ""])
header_text = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\r\n\x00"))


def check_entry(entry: LogEntry) -> None:
    """An accepted record becomes a request the trace reader accepts, or a DataError."""
    try:
        request = to_trace_request(entry, labeller=LABELLER, drop=NO_DROP)
    except DataError:
        event("to request: refused")
        return
    event("to request: accepted")
    parsed = parse_trace_text('{"hairline_trace": 1}\n' + encode_request(request))
    assert parsed.requests == [request]


def corrupt(
    good: st.SearchStrategy[dict[str, Any]], bad: dict[str, st.SearchStrategy[Any]]
) -> st.SearchStrategy[dict[str, Any]]:
    """``good`` records with one field replaced by a value from ``bad``."""

    @st.composite
    def one_bad(draw: st.DrawFn) -> dict[str, Any]:
        record = draw(good)
        key = draw(st.sampled_from(sorted(bad)))
        record[key] = draw(bad[key])
        return record

    return one_bad()


def outcome(parse: Any, value: Any) -> Any:
    try:
        parsed = parse(value)
    except DataError as err:
        event(f"refused: {getattr(err, 'reason', 'other')}")
        return None
    event("accepted")
    return parsed


# --- combined log lines ----------------------------------------------------------------------


def nginx_escape(data: bytes) -> str:
    return "".join(
        chr(b) if 0x20 <= b < 0x7F and b not in (0x22, 0x5C) else f"\\x{b:02X}" for b in data
    )


def apache_escape(data: bytes) -> str:
    out = []
    for b in data:
        if b in (0x22, 0x5C):
            out.append("\\" + chr(b))
        elif 0x20 <= b < 0x7F:
            out.append(chr(b))
        else:
            out.append(f"\\x{b:02x}")
    return "".join(out)


good_combined = st.fixed_dictionaries(
    {
        "escape": st.sampled_from([nginx_escape, apache_escape]),
        "method": good_methods.map(str.encode),
        "target": good_targets,
        "version": good_versions.map(str.encode),
        "time": st.builds(
            lambda d, mo, y, h, zone: f"{d:02d}/{mo}/{y}:{h:02d}:13:20 {zone}",
            st.integers(1, 28),
            st.sampled_from(["Jan", "Feb", "Nov", "Dec"]),
            st.integers(1971, 2100),
            st.integers(0, 23),
            st.sampled_from(["+0000", "-0700", "+0130"]),
        ),
        "status": st.sampled_from(["200", "404", "-"]),
        "size": st.sampled_from(["0", "512", "-"]),
        "referer": st.binary(max_size=16),
        "agent": st.binary(max_size=24),
        "tail": st.sampled_from(["", ' "10.0.0.1"', " 0.003"]),
    }
)
bad_combined = {
    "method": bad_methods.map(lambda m: m.encode("utf-8", "surrogatepass")),
    "target": bad_targets,
    "version": st.sampled_from([b"HTTP/x", b"HTTP/1.1 extra", b"http/1.1"]),
    "time": st.one_of(
        st.sampled_from(["31/Feb/2023:00:00:00 +0000", "01/nov/2023:00:00:00 +0000"]),
        st.sampled_from(["01/Jan/1970:00:00:00 +0100", "01/Jan/2023:25:00:00 +0000"]),
        any_text.filter(lambda t: "]" not in t),
    ),
    "status": st.sampled_from(["2000", "abc"]),
    "size": st.just("-1"),
    "tail": st.sampled_from(['"', "x"]),
}


def combined_line(parts: dict[str, Any]) -> str:
    escape = parts["escape"]
    version = b" " + parts["version"] if parts["version"] else b""
    request = escape(parts["method"] + b" " + parts["target"] + version)
    return (
        f'203.0.113.7 - - [{parts["time"]}] "{request}" {parts["status"]} {parts["size"]} '
        f'"{escape(parts["referer"])}" "{escape(parts["agent"])}"{parts["tail"]}'
    )


@FAST
@given(
    st.one_of(
        good_combined.map(combined_line),
        corrupt(good_combined, bad_combined).map(combined_line),
        st.tuples(good_combined.map(combined_line), st.integers(0, 200)).map(
            lambda lc: lc[0][: lc[1]]  # a truncated line
        ),
        any_text,
    )
)
def test_combined_parser_raises_only_data_errors_and_round_trips(line: str) -> None:
    """False failure: none: derandomised hypothesis draws the same examples on every run
    (deadline=None), and the property holds for every input."""
    entry = outcome(parse_combined_line, line)
    if entry is not None:
        assert parse_combined_line(format_combined_line(entry)) == entry
        check_entry(entry)


# --- JSON log lines --------------------------------------------------------------------------

good_json_log = st.fixed_dictionaries(
    {
        "request": st.builds(
            lambda m, t, v: f"{m} {t.decode('utf-8', 'surrogateescape')} {v}".strip(),
            good_methods,
            good_targets,
            good_versions,
        ),
    },
    optional={
        "msec": st.sampled_from(["1700000000.123", "1700000000", 1700000000.5]),
        "request_time": st.sampled_from(["0.004", "0.000", "-", ""]),
        "status": st.sampled_from(["200", "404", 200, "", "-"]),
        "body_bytes_sent": st.sampled_from(["0", "512", 7]),
        "host": st.sampled_from(["shop.example.com", "", "-"]),
        "http_user_agent": any_text,
        "http_referer": any_text,
        "http_x_a_b": any_text,
        "request_body": any_text,
        "headers": st.lists(st.tuples(any_text, any_text).map(list), max_size=3),
    },
)
good_generic_json = st.fixed_dictionaries(
    {"method": good_methods, "path": st.sampled_from(["/p", "/q?r", "/a b"])},
    optional={
        "query": st.sampled_from(["x=1", ""]),
        "timestamp": st.sampled_from(["2023-11-14T22:13:20Z", 1700000000.5, "1700000000"]),
        "ts_us": st.integers(0, 2**53),
        "time_local": st.just("14/Nov/2023:22:13:20 +0000"),
        "time_iso8601": st.just("2023-11-14T22:13:20+00:00"),
        "body": any_text,
        "body_b64": st.sampled_from(["aGk=", ""]),
        "headers": st.dictionaries(any_text, any_text, max_size=3),
    },
)
bad_json_log = {
    "request": st.one_of(json_leaves, bad_methods),
    "msec": st.one_of(json_leaves, st.sampled_from(["-1", "1e999", "nan"])),
    "request_time": json_leaves,
    "status": st.one_of(json_leaves, st.just("-5")),
    "headers": json_values,
    "body_b64": st.one_of(json_leaves, st.just("!!")),
    "ts_us": json_leaves,
    "time_iso8601": any_text,
    "time_local": any_text,
}
bad_generic_json = {
    "method": st.one_of(json_leaves, bad_methods),
    "path": json_leaves,
    "timestamp": json_values,
    "request_uri": any_text,
    "url": any_text,
    "uri": any_text,
}


@FAST
@given(
    st.one_of(
        good_json_log.map(json.dumps),
        good_generic_json.map(json.dumps),
        corrupt(good_json_log, bad_json_log).map(json.dumps),
        corrupt(good_generic_json, bad_generic_json).map(json.dumps),
        st.dictionaries(any_text, json_values, max_size=4).map(json.dumps),
        any_text,
    )
)
def test_json_log_parser_raises_only_data_errors_and_round_trips(line: str) -> None:
    """False failure: none: derandomised hypothesis draws the same examples on every run
    (deadline=None), and the property holds for every input."""
    entry = outcome(parse_json_log_line, line)
    if entry is not None:
        assert parse_json_log_line(format_json_log_line(entry)) == entry
        check_entry(entry)


# --- HAR entries -----------------------------------------------------------------------------

good_har_headers = st.lists(
    st.fixed_dictionaries(
        {
            "name": st.sampled_from(["accept", "User-Agent", "x-a", ":authority", "cookie"]),
            "value": header_text,
        }
    ),
    max_size=4,
)
good_har_requests = st.fixed_dictionaries(
    {
        "method": good_methods,
        "url": st.builds(
            lambda scheme, host, rest: f"{scheme}://{host}{rest}",
            st.sampled_from(["https", "http", "HTTP"]),
            st.sampled_from(["shop.example.com", "user:pw@H.example:8080", "[::1]:80", ""]),
            st.sampled_from(["", "/", "/a/b?c=1", "?q", "/p#frag", "/ü b"]),
        ),
        "headers": good_har_headers,
    },
    optional={
        "postData": st.one_of(
            st.fixed_dictionaries({"mimeType": st.just("text/plain"), "text": any_text}),
            st.fixed_dictionaries(
                {"mimeType": st.just("x"), "text": st.just("aGk="), "encoding": st.just("base64")}
            ),
            st.fixed_dictionaries(
                {
                    "mimeType": st.just("application/x-www-form-urlencoded; charset=UTF-8"),
                    "params": st.lists(
                        st.fixed_dictionaries({"name": any_text, "value": any_text}), max_size=3
                    ),
                }
            ),
        ),
    },
)
bad_har_requests = {
    "method": st.one_of(json_leaves, bad_methods),
    "url": st.one_of(st.sampled_from(["data:,hi", "/relative", "https://[::1/"]), any_text),
    "headers": st.one_of(
        json_values,
        st.lists(st.fixed_dictionaries({"name": any_text, "value": json_leaves}), max_size=3),
    ),
    "postData": st.one_of(
        json_values,
        st.fixed_dictionaries(
            {"mimeType": st.just("multipart/form-data"), "params": st.just([{"name": "a"}])}
        ),
        st.fixed_dictionaries({"text": st.just("!!"), "encoding": st.just("base64")}),
    ),
}
good_har_entries = st.fixed_dictionaries(
    {
        "request": good_har_requests,
        "startedDateTime": st.sampled_from(
            ["2023-11-14T22:13:20.101Z", "2023-11-14T23:13:21.002+01:00", "2023-11-14T22:13:20"]
        ),
    },
    optional={
        "response": st.fixed_dictionaries(
            {}, optional={"status": json_leaves, "bodySize": json_leaves}
        )
    },
)


@st.composite
def bad_har_entries(draw: st.DrawFn) -> dict[str, Any]:
    entry = draw(good_har_entries)
    if draw(st.booleans()):
        entry["startedDateTime"] = draw(st.one_of(json_leaves, st.just("2023-02-30T00:00:00Z")))
    else:
        entry["request"] = draw(corrupt(st.just(dict(entry["request"])), bad_har_requests))
    return entry


@FAST
@given(st.one_of(good_har_entries, bad_har_entries(), json_values))
def test_har_entry_parser_raises_only_data_errors_and_round_trips(entry: Any) -> None:
    """False failure: none: derandomised hypothesis draws the same examples on every run
    (deadline=None), and the property holds for every input."""
    parsed = outcome(parse_har_entry, entry)
    if parsed is not None:
        assert parse_har_entry(json.loads(json.dumps(format_har_entry(parsed)))) == parsed
        check_entry(parsed)


# --- trace lines -----------------------------------------------------------------------------

token_names = st.sampled_from(["accept", "X-Tenant", "x_a", "!#$%&'*+-.^_`|~"])
good_trace_objects = st.fixed_dictionaries(
    {"path": st.sampled_from(["/a?b=1", "/", "/\u00fc", "/x%20y", '/"q"'])},
    optional={
        "method": good_methods,
        "headers": st.one_of(
            st.none(),
            st.lists(st.tuples(token_names, header_text).map(list), max_size=3),
            st.dictionaries(token_names, header_text, max_size=3),
        ),
        "body_b64": st.one_of(
            st.none(), st.binary(max_size=12).map(lambda b: base64.b64encode(b).decode())
        ),
        "endpoint": st.one_of(st.none(), any_text.filter(bool)),
        "ts_us": st.one_of(st.none(), st.integers(0, 2**64 - 1)),
        "key": st.one_of(st.none(), any_text, st.integers(-(2**63), 2**64 - 1)),
        "id": json_values,
        "meta": json_values,
    },
)
bad_trace_objects = {
    "path": st.one_of(json_leaves, st.sampled_from(["/a b", "", "a", "/\x7f"])),
    "method": st.one_of(json_leaves, bad_methods),
    "headers": st.one_of(
        json_values,
        st.dictionaries(st.sampled_from(["", "a b", "é"]), header_text, min_size=1),
        st.just([["x", "a\r\nb"]]),
    ),
    "body_b64": st.one_of(json_leaves, st.sampled_from(["aGl=", "aGk", "aG k="])),
    "endpoint": st.one_of(json_leaves, st.just("")),
    "ts_us": st.one_of(json_leaves, st.sampled_from([-1, 2**64, 1.0])),
    "key": st.one_of(json_values, st.just(True)),
    "meta": st.sampled_from([float("nan"), "\ud800", [[[[[[[[[[1]]]]]]]]]]]),
    "extra": json_leaves,
}
trace_lines = st.one_of(
    good_trace_objects.map(json.dumps),
    good_trace_objects.map(lambda o: json.dumps(o, ensure_ascii=False)),
    corrupt(good_trace_objects, bad_trace_objects).map(json.dumps),
    st.one_of(any_text, st.just(""), json_values.map(json.dumps)),
)


@FAST
@given(st.lists(trace_lines, min_size=1, max_size=4))
def test_trace_reader_raises_only_data_errors_and_round_trips(lines: list[str]) -> None:
    """False failure: none: derandomised hypothesis draws the same examples on every run
    (deadline=None), and the property holds for every input."""
    trace = outcome(parse_trace_text, "\n".join(['{"hairline_trace": 1}', *lines]))
    if trace is not None:
        again = ['{"hairline_trace": 1}', *map(encode_request, trace.requests)]
        assert parse_trace_text("\n".join(again)).requests == trace.requests


@pytest.fixture(scope="module")
def closed_port() -> Iterator[int]:
    """A loopback port that refuses connections: bound, never listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def place(message: str) -> tuple[int, str] | None:
    """``(3, "path")`` from ``...t.jsonl:3: path: ...``, in either reader's message."""
    m = LINE_FIELD.search(message)
    return (int(m.group(1)), m.group(2)) if m else None


@ENGINE_RUNS
@given(st.lists(trace_lines, min_size=1, max_size=3))
def test_trace_reader_agrees_with_the_engine(
    engine_path: Path, closed_port: int, lines: list[str]
) -> None:
    """False failure: none: derandomised hypothesis draws the same examples on every run
    (deadline=None), and the property holds for every input. The engine runs have a 30-second
    timeout for a parse of a few lines."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.jsonl"
        text = "\n".join(['{"hairline_trace": 1}', *lines]) + "\n"
        # Lone surrogates become bytes that are not UTF-8, which both readers must refuse.
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        refused, ours = False, None
        try:
            read_trace(path)
        except DataError as err:
            refused, ours = True, place(err.message)
        proc = subprocess.run(
            [
                str(engine_path),
                "load",
                "--target",
                f"a=http://127.0.0.1:{closed_port}",
                "--trace",
                str(path),
                "--rate",
                "1000",
                "--duration",
                "0.001",
                "--timeout-ms",
                "20",
            ],
            capture_output=True,
            timeout=30,
        )
    # Decoded by hand: text mode would turn a "\r" in a field name into "\n".
    stderr = proc.stderr.decode("utf-8", "replace")
    event("refused" if refused else "accepted")
    assert refused == (proc.returncode != 0), stderr
    if refused and "cannot read trace" not in stderr:  # not UTF-8: the engine names no line
        assert ours == place(stderr), stderr
