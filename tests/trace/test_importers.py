"""Importers on real-shaped files (tests/trace/data) and on logs a real nginx writes.

The sample files hold what production logs hold: escaped quotes, UTF-8 bytes in paths,
scanners, TLS handshakes sent to a plain-text port, truncated lines and bad dates.
"""

from __future__ import annotations

import gzip
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hairline.errors import ConfigError, DataError
from hairline.trace.format import TraceRequest, read_trace, write_trace
from hairline.trace.importers import (
    ImportOptions,
    ImportReport,
    LogEntry,
    import_files,
    import_lines,
    parse_combined_line,
    parse_iso8601_us,
    parse_json_log_line,
    parse_status_filter,
)
from hairline.trace.labels import Labeller

DATA = Path(__file__).parent / "data"
T0_US = 1_700_000_000_000_000  # 2023-11-14T22:13:20Z, the first second of every sample


def skipping(**kwargs: object) -> ImportOptions:
    return ImportOptions(skip_bad=True, **kwargs)  # type: ignore[arg-type]


def by_path(report: ImportReport) -> dict[str, TraceRequest]:
    return {r.path: r for r in report.requests}


# --- combined logs ---------------------------------------------------------------------------


def test_nginx_combined_log_stops_at_the_first_bad_line_naming_file_and_line() -> None:
    with pytest.raises(DataError) as info:
        import_files([DATA / "nginx_access.log"], "nginx")
    assert info.value.message.startswith(f"{DATA / 'nginx_access.log'}:5: not an HTTP request")
    assert info.value.hint and "--skip-bad" in info.value.hint


def test_nginx_combined_log_with_skip_bad_counts_bad_lines_by_reason() -> None:
    report = import_files([DATA / "nginx_access.log"], "nginx", skipping())

    assert report.records == 17
    assert len(report.requests) == 12
    assert dict(report.skipped) == {
        "not an HTTP request": 3,  # a space in the target, "-", TLS bytes
        "not replayable": 1,  # CONNECT host:443
        "malformed line": 1,  # truncated in the middle of the user agent
    }
    assert report.first_skipped["not replayable"].startswith(f"{DATA / 'nginx_access.log'}:12:")
    paths = by_path(report)
    first = paths["/api/users/123?fields=name,email"]
    assert first.ts_us == T0_US and first.method == "GET"
    assert first.headers == ()  # combined logs keep headers only with keep_headers
    assert first.meta == {"status": 200, "response_bytes": 512}
    # \x22 and \x5C unescape; the UTF-8 bytes of "café" are percent-encoded.
    assert '/search?q="red%20shoes"&page=2' in paths
    assert "/index.php?s=/Index/\\think\\app/invokefunction&function=call_user_func_array" in paths
    assert "/caf%C3%A9/menu" in paths
    # A proxy-style absolute URL keeps its path.
    assert paths["/proxy-check"].meta == {"status": 400, "response_bytes": 157}
    assert paths["/api/cart/items/31337"].method == "DELETE"
    assert report.sorted_by_time
    assert [r.ts_us for r in report.requests] == sorted(r.ts_us or 0 for r in report.requests)


def test_keep_headers_keeps_the_user_agent_and_referer_of_combined_logs() -> None:
    report = import_files([DATA / "nginx_access.log"], "nginx", skipping(keep_headers=True))
    paths = by_path(report)
    assert paths["/api/users/123?fields=name,email"].headers == (
        ("referer", "https://shop.example.com/account"),
        (
            "user-agent",
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
            "Chrome/119.0.0.0 Safari/537.36",
        ),
    )
    agent = dict(paths['/search?q="red%20shoes"&page=2'].headers)["user-agent"]
    assert agent == 'Mozilla/5.0 (compatible; "QuoteBot"/1.0; +https://bot.example.org)'
    assert paths["/api/search"].headers == (("user-agent", "python-requests/2.31.0"),)


def test_apache_combined_log_reads_backslash_escapes_and_dashes() -> None:
    with pytest.raises(DataError, match=r"apache_access.log:4: not an HTTP request"):
        import_files([DATA / "apache_access.log"], "apache")
    report = import_files([DATA / "apache_access.log"], "apache", skipping(keep_headers=True))

    assert dict(report.skipped) == {
        "not an HTTP request": 2,  # "-" (a 408 timeout) and TLS bytes
        "bad timestamp": 1,  # 31/Feb
        "not replayable": 1,  # OPTIONS * (Apache's internal dummy connection)
    }
    paths = by_path(report)
    assert len(paths) == 6
    # Apache writes times in its zone; +0100 is one hour ahead of UTC.
    assert paths["/api/users/123"].ts_us == T0_US
    quoted = paths['/search?q="quoted"&lang=en']
    assert quoted.meta == {"status": 200}  # %b is "-" for an empty response
    assert dict(paths["/api/users/12"].headers)["user-agent"] == 'Mozilla/5.0 ("Fancy" UA) \\o/'
    assert paths["/api/users/11"].headers == ()  # a common-log-format line
    assert paths["/api/users/9/avatar"].meta == {"status": 200, "response_bytes": 20311}


# --- JSON logs -------------------------------------------------------------------------------


def test_nginx_json_log_gives_arrival_times_headers_and_bodies() -> None:
    with pytest.raises(DataError, match=r"nginx_json.log:3: not an HTTP request"):
        import_files([DATA / "nginx_json.log"], "jsonl")
    report = import_files([DATA / "nginx_json.log"], "nginx-json", skipping())

    assert dict(report.skipped) == {
        "not an HTTP request": 2,  # an empty request, TLS bytes (raw, not UTF-8)
        "not JSON": 1,  # truncated
        "bad timestamp": 1,
    }
    paths = by_path(report)
    users = paths["/api/users/123?fields=name"]
    # msec is when nginx logged the request; it arrived request_time earlier.
    assert users.ts_us == T0_US + 123_000 - 4_000
    assert dict(users.headers) == {
        "referer": "https://shop.example.com/account",
        "user-agent": "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Chrome/119.0.0.0 Safari/537.36",
    }  # the cookie is dropped, the empty x-request-id too
    search = paths["/api/search?lang=en"]
    assert search.method == "POST"
    assert search.body == b'{"q":"red \\"shoes\\"","page":2}'
    assert dict(search.headers)["x-request-id"] == "7f3a9c"
    profile = paths["/api/users/123/profile"]
    assert profile.body == '{"name":"Zoë","bio":"line one\\nline two"}'.encode()
    assert profile.meta == {"status": 204, "response_bytes": 0}


def test_sensitive_headers_are_dropped_unless_asked_and_more_can_be_dropped() -> None:
    kept = import_files([DATA / "nginx_json.log"], "jsonl", skipping(keep_sensitive=True))
    assert dict(by_path(kept)["/api/users/123?fields=name"].headers)["cookie"] == (
        "session=9c1e07a2; theme=dark"
    )
    fewer = import_files(
        [DATA / "nginx_json.log"], "jsonl", skipping(drop_headers=frozenset({"User-Agent"}))
    )
    assert all("user-agent" not in dict(r.headers) for r in fewer.requests)


def test_status_and_host_filters_count_what_they_drop() -> None:
    report = import_files(
        [DATA / "nginx_json.log"],
        "jsonl",
        skipping(status=parse_status_filter("2xx"), hosts=("api.example.com",)),
    )
    assert [r.path for r in report.requests] == ["/api/users/456/orders/9"]
    assert dict(report.filtered) == {"host": 3}
    with pytest.raises(ConfigError, match="not a status"):
        parse_status_filter("200,oops")
    assert parse_status_filter("2xx,304")(304) and not parse_status_filter("2xx")(None)


def test_generic_json_keys_are_understood() -> None:
    entry = parse_json_log_line(
        '{"timestamp": "2023-11-14T23:13:20.5+01:00", "method": "PATCH", "path": "/a b",'
        ' "query": "x=1", "headers": {"Accept": "*/*"}, "body_b64": "aGk=", "status": 201}'
    )
    assert entry == LogEntry(
        method="PATCH",
        target="/a%20b?x=1",
        ts_us=T0_US + 500_000,
        headers=(("Accept", "*/*"),),
        body=b"hi",
        status=201,
    )
    assert parse_json_log_line('{"ts_us": 5, "request": "GET / HTTP/1.1"}').ts_us == 5


def test_headers_keep_to_the_engines_rule_for_names_and_values() -> None:
    lines = [
        '{"ts_us": 1, "request": "GET /a HTTP/1.1", "http_x_tenant": "7\\tb"}',
        '{"ts_us": 2, "request": "GET /b HTTP/1.1", "http_x_tenant": "\\u001b[31mred"}',
        '{"ts_us": 3, "request": "GET /c HTTP/1.1", "headers": [["X_Under", "1"]]}',
    ]
    report = import_lines(
        "jsonl", [("log", i, line) for i, line in enumerate(lines, 1)], skipping()
    )

    assert [r.path for r in report.requests] == ["/a", "/c"]
    assert report.requests[0].headers == (("x-tenant", "7\tb"),)
    assert report.requests[1].headers == (("X_Under", "1"),)
    assert report.skipped == {"bad header": 1}
    assert 'log:2: header "x-tenant" has a control character' in report.first_skipped["bad header"]


def test_labels_and_normalised_ids_are_applied_on_import() -> None:
    labeller = Labeller(normalize_ids=True)
    report = import_files([DATA / "nginx_access.log"], "nginx", skipping(labeller=labeller))
    labels = {r.label for r in report.requests}
    assert {"/api/users/:id", "/api/users/:id/orders/:id", "/api/products/:id"} <= labels


# --- HAR -------------------------------------------------------------------------------------


def test_a_browsers_har_export_keeps_what_a_request_carries() -> None:
    report = import_files([DATA / "browser.har"], "har")

    assert report.records == 7
    assert dict(report.filtered) == {"not http(s)": 1}  # a data: URL
    paths = by_path(report)
    assert list(paths) == [
        "/",
        "/api/users/123?fields=name,email",
        "/api/search?lang=en",
        "/g/collect?v=2&tid=G-XXXX&cid=555",
        "/login",
        "/api/products/3f2504e0-4f89-11d3-9a0c-0305e82c3301",  # the #fragment is not sent
    ]
    users = paths["/api/users/123?fields=name,email"]
    assert users.ts_us == T0_US + 350_000
    names = [name for name, _ in users.headers]
    # HTTP/2 pseudo-headers, the cookie and the bearer token are not replayed.
    assert names == ["accept", "accept-encoding", "accept-language", "sec-ch-ua", "user-agent"]
    search = paths["/api/search?lang=en"]
    assert search.method == "POST" and search.body == b'{"q":"red \\"shoes\\"","page":2}'
    assert "content-length" not in dict(search.headers)
    login = paths["/login"]
    # Form posts exported as params only are rebuilt; Host and Connection are the engine's.
    assert login.body == b"user=alice&next=%2Fcart%3Fx%3D1"
    assert [n for n, _ in login.headers] == ["Content-Type", "User-Agent", "Accept"]
    assert login.ts_us == T0_US + 1_002_000  # +01:00 in the export
    assert paths["/api/products/3f2504e0-4f89-11d3-9a0c-0305e82c3301"].meta is None


def test_har_host_filter_keeps_one_service() -> None:
    report = import_files([DATA / "browser.har"], "har", ImportOptions(hosts=("shop.example.com",)))
    assert len(report.requests) == 5
    assert dict(report.filtered) == {"not http(s)": 1, "host": 1}
    on_port = import_files(
        [DATA / "browser.har"], "har", ImportOptions(hosts=("shop.example.com:8080",))
    )
    assert [r.path for r in on_port.requests] == ["/login"]


def test_bad_har_entries_name_the_line_where_the_entry_starts() -> None:
    path = DATA / "broken.har"
    with pytest.raises(DataError) as info:
        import_files([path], "har")
    message = info.value.message
    assert "entry 2: bad timestamp" in message
    line_no = int(message.split(":")[1])
    assert path.read_text().splitlines()[line_no - 1].strip() == "{"

    report = import_files([path], "har", skipping())
    assert dict(report.skipped) == {
        "bad timestamp": 1,
        "not an HTTP request": 1,  # no method
        "not replayable": 1,  # a relative URL
    }
    assert len(report.requests) == 3


def test_a_file_that_is_not_har_is_an_error(tmp_path: Path) -> None:
    broken = tmp_path / "x.har"
    broken.write_text('{"log": {"entries": [\n{"request": }\n]}}')
    with pytest.raises(DataError, match=r"x.har:2: not valid JSON"):
        import_files([broken], "har")
    broken.write_text('{"entries": []}')
    with pytest.raises(DataError, match=r"no log\.entries"):
        import_files([broken], "har")


# --- files -----------------------------------------------------------------------------------


def test_rotated_gzip_logs_are_read_in_order_with_their_own_line_numbers(tmp_path: Path) -> None:
    lines = (DATA / "nginx_access.log").read_bytes().splitlines(keepends=True)
    old = tmp_path / "access.log.1.gz"
    old.write_bytes(gzip.compress(b"".join(lines[:4])))
    new = tmp_path / "access.log"
    new.write_bytes(b"".join(lines[4:]))
    with pytest.raises(DataError, match=r"access.log:1: not an HTTP request"):
        import_files([old, new], "nginx")
    report = import_files([old, new], "nginx", skipping())
    assert len(report.requests) == 12 and report.sources == [str(old), str(new)]


def test_unknown_formats_and_missing_files_are_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a format"):
        import_files([DATA / "nginx_access.log"], "w3c")
    with pytest.raises(DataError, match="cannot read"):
        import_files([tmp_path / "nope.log"], "nginx")


def test_import_lines_is_the_pure_core() -> None:
    line = '1.2.3.4 - - [14/Nov/2023:22:13:20 +0000] "GET /x?y=1 HTTP/1.1" 200 5 "-" "curl/8"\n'
    report = import_lines("combined", [("mem", 1, line), ("mem", 2, "   ")])
    assert report.records == 1
    assert report.requests == [
        TraceRequest(
            path="/x?y=1",
            endpoint="/x",
            ts_us=T0_US,
            meta={"status": 200, "response_bytes": 5},
        )
    ]


def test_timestamps() -> None:
    assert parse_iso8601_us("2023-11-14T22:13:20Z") == T0_US
    assert parse_iso8601_us("2023-11-14T22:13:20.123456789Z") == T0_US + 123_456
    assert parse_iso8601_us("2023-11-14T23:13:20.5+0100") == T0_US + 500_000
    assert parse_iso8601_us("2023-11-14 22:13:20") == T0_US  # no zone: UTC
    entry = parse_combined_line(
        '::1 - - [14/Nov/2023:14:13:20 -0800] "GET / HTTP/1.1" 200 1 "-" "-"'
    )
    assert entry.ts_us == T0_US
    for bad in ("2023-02-30T00:00:00Z", "1969-12-31T23:59:59Z", "yesterday"):
        with pytest.raises(DataError, match="bad timestamp"):
            parse_iso8601_us(bad)


# --- a real nginx ----------------------------------------------------------------------------

NGINX_CONF = """
daemon off;
master_process off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log;
events {{ worker_connections 32; }}
http {{
  client_body_temp_path {dir}/body;
  proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fastcgi;
  uwsgi_temp_path {dir}/uwsgi;
  scgi_temp_path {dir}/scgi;
  log_format json escape=json '{{"msec":"$msec","request_time":"$request_time",'
    '"request":"$request","status":"$status","body_bytes_sent":"$body_bytes_sent",'
    '"http_referer":"$http_referer","http_user_agent":"$http_user_agent","host":"$host",'
    '"http_cookie":"$http_cookie","request_body":"$request_body"}}';
  server {{
    listen unix:{dir}/front.sock;
    access_log {dir}/access.log combined;
    access_log {dir}/access.json.log json;
    location / {{ return 200 "ok\\n"; }}
    location = /wp-login.php {{ return 404; }}
    # Proxying makes nginx read the body, so that $request_body is logged.
    location /echo/ {{ proxy_pass http://unix:{dir}/back.sock:/ok; }}
  }}
  server {{
    listen unix:{dir}/back.sock;
    access_log off;
    location / {{ return 200 "back\\n"; }}
  }}
}}
"""


@pytest.fixture
def nginx_logs(tmp_path: Path) -> Iterator[Path]:
    """Run nginx on a Unix socket, send it real and garbage requests, yield its log folder."""
    binary = shutil.which("nginx", path="/usr/sbin:/usr/local/sbin:/usr/bin:/usr/local/bin")
    if binary is None:
        pytest.skip("nginx is not installed (make sysdeps installs it)")
    conf = tmp_path / "nginx.conf"
    conf.write_text(NGINX_CONF.format(dir=tmp_path))
    proc = subprocess.Popen(
        [binary, "-p", str(tmp_path), "-c", str(conf)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        sock_path = tmp_path / "front.sock"
        deadline = time.monotonic() + 10
        while not sock_path.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                stderr = proc.stderr.read().decode() if proc.stderr else ""
                pytest.fail(f"nginx did not start: {stderr}{(tmp_path / 'error.log').read_text()}")
            time.sleep(0.02)
        body = b'{"q":"red \\"shoes\\"","lang":"en"}'
        for raw in (
            b"GET /api/users/123?fields=name HTTP/1.1\r\nHost: shop.example.com\r\n"
            b'User-Agent: Mozilla/5.0 ("quoted") \\o/\r\nReferer: https://shop.example.com/\r\n'
            b"Cookie: session=secret\r\nConnection: close\r\n\r\n",
            b"POST /echo/search HTTP/1.1\r\nHost: shop.example.com\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n" % len(body) + body,
            b"GET /caf\xc3\xa9 HTTP/1.1\r\nHost: shop.example.com\r\nConnection: close\r\n\r\n",
            b"\x16\x03\x01\x00\xf1\x01\x00\x00\xed\x03\x03",  # a TLS ClientHello's first bytes
            b"GET /wp-login.php HTTP/1.1\r\nHost: shop.example.com\r\nConnection: close\r\n\r\n",
        ):
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(10)
                sock.connect(str(sock_path))
                sock.sendall(raw)
                if not raw.startswith((b"GET", b"POST")):
                    # nginx waits for the rest of a request line; EOF ends it. (Closing
                    # early on a proxied request would log 499, the client gave up.)
                    sock.shutdown(socket.SHUT_WR)
                while sock.recv(4096):
                    pass
        yield tmp_path
    finally:
        proc.send_signal(signal.SIGQUIT)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def test_logs_written_by_a_real_nginx_import_and_read_back(nginx_logs: Path) -> None:
    combined = import_files([nginx_logs / "access.log"], "nginx", skipping(keep_headers=True))
    as_json = import_files([nginx_logs / "access.json.log"], "jsonl", skipping())

    for report in (combined, as_json):
        assert dict(report.skipped) == {"not an HTTP request": 1}, report.first_skipped
        assert [r.path for r in report.requests] == [
            "/api/users/123?fields=name",
            "/echo/search",
            "/caf%C3%A9",
            "/wp-login.php",
        ]
        users = report.requests[0]
        assert dict(users.headers)["user-agent"] == 'Mozilla/5.0 ("quoted") \\o/'
        assert "cookie" not in dict(users.headers)
    assert as_json.requests[1].body == b'{"q":"red \\"shoes\\"","lang":"en"}'
    assert [r.meta["status"] for r in as_json.requests] == [200, 200, 200, 404]
    # Both logs saw the same requests at the same moments (to the second).
    for a, b in zip(combined.requests, as_json.requests, strict=True):
        assert abs((a.ts_us or 0) - (b.ts_us or 0)) < 2_000_000

    out = write_trace(nginx_logs / "trace.jsonl", as_json.header(), as_json.requests)
    assert read_trace(out).requests == as_json.requests
