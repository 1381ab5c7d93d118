"""The egress proxy in front of a real HTTP server on loopback: reads reach it, writes never
do, and the proxy process never outlives its parent."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from hairline.arms.egress import EgressProxy, EgressSpec, EgressStats
from hairline.errors import ArmFailed
from hairline.kit.ports import free_port


class Downstream(ThreadingHTTPServer):
    """A downstream service that answers every request with its own name and remembers
    what it was sent."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.received: list[tuple[str, str, bytes]] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Downstream

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        self.server.received.append((self.command, self.path, body))
        reply = json.dumps({"from": "downstream", "path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(reply)

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def downstream() -> Iterator[Downstream]:
    server = Downstream()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def request(
    address: str, method: str, path: str, body: bytes | None = None, *, chunked: bool = False
) -> tuple[int, bytes]:
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        if chunked:
            conn.request(method, path, body=iter([body or b""]), encode_chunked=True)
        else:
            conn.request(method, path, body=body)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie counts: it runs nothing)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"


def test_writes_are_answered_by_the_proxy_and_reads_reach_the_downstream(
    downstream: Downstream, engine_path: Path, tmp_path: Path
) -> None:
    spec = EgressSpec(listen="127.0.0.1:0", upstream=downstream.address, http=True)
    with EgressProxy(spec, stats_path=tmp_path / "egress.json", engine=engine_path) as proxy:
        assert proxy.address is not None
        status, body = request(proxy.address, "GET", "/items?page=2")
        assert (status, json.loads(body)["path"]) == (200, "/items?page=2")
        assert request(proxy.address, "POST", "/orders", b'{"qty": 1}') == (200, b"{}")
        assert request(proxy.address, "PUT", "/cart", b"x" * 10_000, chunked=True) == (
            200,
            b"{}",
        )
        assert request(proxy.address, "HEAD", "/items")[0] == 200
    stats = proxy.stop()

    assert [(m, p) for m, p, _ in downstream.received] == [
        ("GET", "/items?page=2"),
        ("HEAD", "/items"),
    ]
    assert stats == EgressStats(
        connections=4,
        upstream_errors=0,
        forwarded={"GET /items": 1, "HEAD /items": 1},
        dropped={"POST /orders": 1, "PUT /cart": 1},
    )
    assert gone(proxy.pid or 0)


def test_a_named_write_is_forwarded_and_the_synthetic_answer_is_configurable(
    downstream: Downstream, engine_path: Path, tmp_path: Path
) -> None:
    spec = EgressSpec(
        listen="127.0.0.1:0",
        upstream=downstream.address,
        http=True,
        forward=("GET", "POST /v1/lookup"),
        drop_status=202,
        drop_body="queued",
        drop_content_type="text/plain",
    )
    with EgressProxy(spec, stats_path=tmp_path / "egress.json", engine=engine_path) as proxy:
        assert proxy.address is not None
        assert request(proxy.address, "POST", "/v1/lookup", b"k")[0] == 200
        assert request(proxy.address, "POST", "/v1/write", b"k") == (202, b"queued")
    assert [(m, p, b) for m, p, b in downstream.received] == [("POST", "/v1/lookup", b"k")]
    assert proxy.stop().dropped == {"POST /v1/write": 1}


def test_an_unreachable_downstream_is_a_502_not_a_hang(engine_path: Path, tmp_path: Path) -> None:
    spec = EgressSpec(listen="127.0.0.1:0", upstream=f"127.0.0.1:{free_port()}", http=True)
    with EgressProxy(spec, stats_path=tmp_path / "egress.json", engine=engine_path) as proxy:
        assert proxy.address is not None
        status, body = request(proxy.address, "GET", "/items")
        assert status == 502 and b"connection refused" in body
    assert proxy.stop().upstream_errors == 1


def test_without_http_every_byte_is_relayed(
    downstream: Downstream, engine_path: Path, tmp_path: Path
) -> None:
    spec = EgressSpec(listen="127.0.0.1:0", upstream=downstream.address)
    with EgressProxy(spec, stats_path=tmp_path / "egress.json", engine=engine_path) as proxy:
        assert proxy.address is not None
        assert request(proxy.address, "POST", "/orders", b"x")[0] == 200
    assert downstream.received == [("POST", "/orders", b"x")]
    assert proxy.stop() == EgressStats(connections=1)


def test_a_proxy_that_cannot_listen_fails_with_the_engines_reason(
    engine_path: Path, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        spec = EgressSpec(listen=f"127.0.0.1:{port}", upstream="127.0.0.1:9", http=True)
        proxy = EgressProxy(spec, stats_path=tmp_path / "egress.json", engine=engine_path)
        with pytest.raises(ArmFailed, match="cannot listen"):
            proxy.start()
    assert proxy.stop() == EgressStats()


_CHILD = """
import sys, time
from pathlib import Path
from hairline.arms.egress import EgressProxy, EgressSpec
spec = EgressSpec(listen="127.0.0.1:0", upstream="127.0.0.1:9", http=True)
proxy = EgressProxy(spec, stats_path=Path(sys.argv[1]), engine=Path(sys.argv[2])).start()
print(proxy.pid, flush=True)
time.sleep(60)
"""


def test_the_proxy_dies_with_its_parent(engine_path: Path, tmp_path: Path) -> None:
    """False failure: about 1e-6: the proxy must exit within 5 s of its parent's death."""
    parent = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(tmp_path / "egress.json"), str(engine_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        assert not gone(pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 5
        while not gone(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert gone(pid)
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()  # type: ignore[union-attr]


_NS_CLIENT = """
import http.client, sys
for method in ("GET", "POST"):
    conn = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=5)
    conn.request(method, "/items", body=b"x" if method == "POST" else None)
    print(method, conn.getresponse().status, flush=True)
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None, reason="network namespaces need root"
)
def test_inside_a_namespace_the_host_loopback_is_reached_through_the_proxy(
    downstream: Downstream, engine_path: Path, tmp_path: Path
) -> None:
    name = f"hltest-egress-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        # The same address as the downstream, but on the namespace's own loopback.
        spec = EgressSpec(
            listen=downstream.address,
            upstream=downstream.address,
            netns=Path("/run/netns") / name,
            http=True,
        )
        with EgressProxy(spec, stats_path=tmp_path / "egress.json", engine=engine_path):
            port = downstream.address.rsplit(":", 1)[1]
            client = subprocess.run(
                ["ip", "netns", "exec", name, sys.executable, "-c", _NS_CLIENT, port],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            )
        assert client.stdout.split("\n")[:2] == ["GET 200", "POST 200"]
        assert [(m, p) for m, p, _ in downstream.received] == [("GET", "/items")]
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False)
