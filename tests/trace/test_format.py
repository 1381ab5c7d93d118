"""Reading and writing traces: exactly what the engine accepts, written atomically.

The engine (engine/src/format/trace.rs) is the reference: the table of tricky lines below is run
through both readers, which must agree on accepting each line and, when they refuse it, on
the line and the field they name.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from hairline.errors import DataError
from hairline.trace.format import (
    TraceRequest,
    encode_request,
    parse_trace_text,
    read_trace,
    request_problem,
    write_trace,
)

HEADER = '{"hairline_trace": 1, "source": "test"}'
_ENGINE_LINE_ERROR = re.compile(r"error: .*?:(\d+): ([^:]+): ")


def trace_text(*lines: str) -> str:
    return "\n".join([HEADER, *lines]) + "\n"


def line_and_field(err: DataError) -> tuple[int, str]:
    m = re.match(r".*?:(\d+): ([^:]+): ", err.message)
    assert m is not None, err.message
    return int(m.group(1)), m.group(2)


def test_a_full_request_round_trips_through_a_file(tmp_path: Path) -> None:
    requests = [
        TraceRequest(
            path="/api/search?q=shoes&lang=en",
            method="POST",
            headers=(("content-type", "application/json"), ("x-tenant", "7"), ("x-tenant", "8")),
            body=b'{"q": "shoes"}\x00\xff',
            endpoint="search",
            ts_us=1_700_000_000_123_456,
            key="user-42",
            id={"trace": "abc"},
            meta={"status": 200, "note": "Zoë"},
        ),
        TraceRequest(path="/api/feed?user=1"),
    ]
    path = write_trace(tmp_path / "t.jsonl", {"source": "test"}, requests)

    trace = read_trace(path)

    assert trace.header == {"hairline_trace": 1, "source": "test"}
    assert trace.requests == requests
    assert trace.requests[1].label == "/api/feed"
    assert [p.name for p in path.parent.iterdir()] == ["t.jsonl"]  # no temp file left


def test_the_engines_own_sample_trace_reads(engine_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "sample.jsonl"
    subprocess.run(
        [str(engine_path), "sample-trace", "--requests", "50", "-o", str(out)], check=True
    )
    trace = read_trace(out)
    assert len(trace.requests) == 50
    assert trace.header["source"] == "sample-trace"
    assert {r.label for r in trace.requests} <= {"/api/feed", "/api/search", "/api/profile"}


def test_object_headers_are_read_in_the_engines_order_and_integer_keys_as_text() -> None:
    trace = parse_trace_text(
        trace_text('{"path": "/a", "headers": {"x-b": "2", "accept": "*/*"}, "key": 7}')
    )
    (request,) = trace.requests
    assert request.headers == (("accept", "*/*"), ("x-b", "2"))
    assert request.key == "7"
    assert request.method == "GET" and request.endpoint is None


@pytest.mark.parametrize(
    ("text", "line", "field"),
    [
        (trace_text('{"path": "/a"}', '{"method": "GET"}'), 3, "path"),
        (trace_text('{"path": "/a", "body_b64": "%%%"}'), 2, "body_b64"),
        (trace_text('{"path": "/a", "ts_us": -4}'), 2, "ts_us"),
        (trace_text('{"path": "/a", "headers": {"bad name": "v"}}'), 2, "headers"),
        (trace_text('{"path": "/a", "heders": {}}'), 2, "heders"),
        (trace_text('{"path": "no-slash"}'), 2, "path"),
        (trace_text("not json"), 2, "json"),
        ('{"path": "/a"}\n', 1, "hairline_trace"),
        ('{"hairline_trace": 2}\n{"path": "/a"}', 1, "hairline_trace"),
        ("\n\n" + trace_text("", '{"path": "/a b"}'), 5, "path"),
    ],
)
def test_a_bad_line_names_file_line_and_field(text: str, line: int, field: str) -> None:
    with pytest.raises(DataError) as info:
        parse_trace_text(text, source="t.jsonl")
    assert info.value.message.startswith(f"t.jsonl:{line}: {field}: ")
    assert info.value.hint and "trace-format.md" in info.value.hint


def test_an_empty_trace_and_a_non_utf8_file_are_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="has no requests"):
        parse_trace_text(HEADER + "\n\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(HEADER.encode() + b'\n{"path": "/a"}\n{"path": "/\xff"}\n')
    with pytest.raises(DataError, match=r"bad.jsonl:3: json: not valid UTF-8"):
        read_trace(bad)
    with pytest.raises(DataError, match="cannot read trace"):
        read_trace(tmp_path / "missing.jsonl")


def test_a_trace_with_more_labels_than_the_engine_replays_is_not_written(tmp_path: Path) -> None:
    target = tmp_path / "t.jsonl"
    requests = [TraceRequest(path=f"/users/{i}") for i in range(65_536)]
    with pytest.raises(DataError, match="more than 65,535 endpoint labels") as err:
        write_trace(target, None, requests)
    assert err.value.hint is not None and "--normalize-ids" in err.value.hint
    assert not target.exists()
    write_trace(target, None, requests[:65_535])
    assert len(read_trace(target).requests) == 65_535


def test_writing_checks_every_request_and_never_leaves_half_a_file(tmp_path: Path) -> None:
    target = tmp_path / "t.jsonl"
    target.write_text("previous contents\n")
    good = TraceRequest(path="/ok")
    with pytest.raises(DataError, match="headers"):
        write_trace(target, None, [good, TraceRequest(path="/x", headers=(("a b", "v"),))])
    with pytest.raises(DataError, match="no requests"):
        write_trace(target, None, [])
    assert target.read_text() == "previous contents\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]
    assert request_problem(TraceRequest(path="/x", meta=float("nan"))) is not None
    assert request_problem(TraceRequest(path="/x", endpoint="")) is not None
    assert json.loads(encode_request(good)) == {"path": "/ok"}


# Lines where Python's json and serde_json differ, and every rule of the format.
TRICKY_LINES = [
    '{"path": "/a", "meta": ' + "[" * 126 + "]" * 126 + "}",
    '{"path": "/a", "meta": ' + "[" * 127 + "]" * 127 + "}",
    '{"path": "/a", "meta": "\\ud800"}',
    '{"path": "/a", "meta": "\\udc00x"}',
    '{"path": "/a", "meta": "\\ud83d\\ude00"}',
    '{"path": "/a", "meta": 1e400}',
    '{"path": "/a", "meta": 1' + "0" * 400 + "}",
    '{"path": "/a", "meta": NaN}',
    '{"path": "/a", "meta": -Infinity}',
    '{"path": "/a", "ts_us": 18446744073709551615}',
    '{"path": "/a", "ts_us": 18446744073709551616}',
    '{"path": "/a", "ts_us": 1.0}',
    '{"path": "/a", "ts_us": 1e2}',
    '{"path": "/a", "ts_us": -0}',
    '{"path": "/a", "ts_us": true}',
    '{"path": "/a", "ts_us": "5"}',
    '{"path": "/a", "key": true}',
    '{"path": "/a", "key": 1.5}',
    '{"path": "/a", "key": -0}',
    '{"path": "/a", "key": [1]}',
    '{"path": "/a", "body_b64": "aGk="}',
    '{"path": "/a", "body_b64": "aGl="}',
    '{"path": "/a", "body_b64": "aGk"}',
    '{"path": "/a", "body_b64": ""}',
    '{"path": "/a", "body_b64": "aG k="}',
    '{"path": "/a", "path": "/b c"}',
    '{"zz": 1, "aa": 2, "path": "/a"}',
    '{"path": "/\u00fc"}',
    '{"path": "/a\u007f"}',
    '{"path": "/a\\u0000"}',
    '{"path": null}',
    '{"path": "/a", "method": null}',
    '{"path": "/a", "method": "G\u00e9T"}',
    '{"path": "/a", "method": ""}',
    '{"path": "/a", "method": "M-SEARCH"}',
    '{"path": "/a", "endpoint": null, "headers": null, "key": null, "ts_us": null}',
    '{"path": "/a", "endpoint": ""}',
    '{"path": "/a", "endpoint": 3}',
    '{"path": "/a", "headers": {"X": "a\u007fb"}}',
    '{"path": "/a", "headers": {"X": "a\\rb"}}',
    '{"path": "/a", "headers": {"X": 1}}',
    '{"path": "/a", "headers": [["x", "1", "2"]]}',
    '{"path": "/a", "headers": [["x", "1"], ["x", "2"]]}',
    '{"path": "/a", "headers": "x: 1"}',
    '{"path": "/a", "id": [1, {"b": null}], "meta": {"any": "thing"}}',
    '{"path": "/a", "meta": "a\tb"}',
    '{"path": "/a"} ',
    '\u00a0{"path": "/a"}\u00a0',
    '\x1c{"path": "/a"}',
    '{"path": "/a"}\x0b',
    "[1, 2]",
    '"just a string"',
    '{"path": "/a"} {"path": "/b"}',
]


@pytest.fixture(scope="module")
def closed_port() -> Iterator[int]:
    """A loopback port that refuses connections: bound, never listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def engine_verdict(engine: Path, trace: Path, port: int) -> tuple[int, str] | None:
    """None if the engine accepts the trace, else the (line, field) it names."""
    proc = subprocess.run(
        [
            str(engine),
            "load",
            "--target",
            f"a=http://127.0.0.1:{port}",
            "--trace",
            str(trace),
            "--rate",
            "1000",
            "--duration",
            "0.001",
            "--timeout-ms",
            "50",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if proc.returncode == 0:
        return None
    m = _ENGINE_LINE_ERROR.search(proc.stderr)
    assert m is not None, proc.stderr
    return int(m.group(1)), m.group(2)


def python_verdict(trace: Path) -> tuple[int, str] | None:
    try:
        read_trace(trace)
    except DataError as err:
        return line_and_field(err)
    return None


def test_python_and_the_engine_agree_on_every_tricky_line(
    engine_path: Path, closed_port: int, tmp_path: Path
) -> None:
    disagreements = []
    for i, line in enumerate(TRICKY_LINES):
        path = tmp_path / f"t{i}.jsonl"
        path.write_text(f'{HEADER}\n{{"path": "/first"}}\n{line}\n', encoding="utf-8")
        ours, theirs = python_verdict(path), engine_verdict(engine_path, path, closed_port)
        if ours != theirs:
            disagreements.append(f"{line[:60]!r}: python {ours}, engine {theirs}")
    assert not disagreements, "\n".join(disagreements)


def test_a_control_character_in_a_header_value_stops_python_and_the_engine_alike(
    engine_path: Path, closed_port: int, tmp_path: Path
) -> None:
    for value, verdict in (("a\\u0001b", (3, "headers")), ("\\u007f", (3, "headers"))):
        path = tmp_path / "t.jsonl"
        path.write_text(
            f'{HEADER}\n{{"path": "/a"}}\n{{"path": "/b", "headers": {{"x": "{value}"}}}}\n'
        )
        assert python_verdict(path) == engine_verdict(engine_path, path, closed_port) == verdict
    with pytest.raises(DataError, match='header "x" has a control character in its value'):
        read_trace(path)
    # A tab is a header value's own, and _ is a token like - (RFC 9110).
    path.write_text(f'{HEADER}\n{{"path": "/b", "headers": {{"x_y": "a\\tb"}}}}\n')
    assert python_verdict(path) is None and engine_verdict(engine_path, path, closed_port) is None


@pytest.mark.parametrize(
    "header",
    ['{"hairline_trace": 1.0}', '{"hairline_trace": true}', '{"hairline_trace": "1"}', "{}"],
)
def test_python_and_the_engine_agree_on_headers(
    header: str, engine_path: Path, closed_port: int, tmp_path: Path
) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(f'{header}\n{{"path": "/a"}}\n')
    assert (
        python_verdict(path)
        == engine_verdict(engine_path, path, closed_port)
        == (
            1,
            "hairline_trace",
        )
    )
