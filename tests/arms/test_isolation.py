"""An isolated arm: its service runs in a namespace, reaches only its allow-list, is
refused (at once, and counted) elsewhere, and leaves nothing behind when it stops.

Needs root (network namespaces, nftables); skips with the reason elsewhere. The relays
need the egress proxy (``hairline-engine egress``).
"""

from __future__ import annotations

import importlib.util
import socket
import sys
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from hairline.arms.isolation import dropped_write_rows
from hairline.arms.local import ArmSpec, LocalArm, free_port
from hairline.arms.netns import leftovers, netns_available, sweep_namespaces
from hairline.config.isolation import IsolationConfig

SERVICE = Path(__file__).with_name("isolated_service.py")
PREFIX = "hltestiso-"
pytestmark = pytest.mark.skipif(
    bool(reason := netns_available()), reason=f"network namespaces unavailable: {reason}"
)
needs_egress = pytest.mark.skipif(
    importlib.util.find_spec("hairline.arms.egress") is None,
    reason="the egress proxy (hairline.arms.egress) is not built yet",
)


def spec(port: int) -> object:
    def at(host: str) -> ArmSpec:
        return ArmSpec(name="A", command=[sys.executable, str(SERVICE), host, str(port)])

    return at


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


@pytest.fixture
def clean() -> Iterator[None]:
    sweep_namespaces(PREFIX)
    yield
    assert leftovers(PREFIX) == []


class Downstream(BaseHTTPRequestHandler):
    """A downstream service that remembers every request it was sent."""

    seen: ClassVar[list[str]] = []

    def _answer(self) -> None:
        Downstream.seen.append(f"{self.command} {self.path}")
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.send_response(200)
        self.send_header("Content-Length", "4")
        self.end_headers()
        self.wfile.write(b"real")

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def downstream() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Downstream)
    Downstream.seen = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_destination_off_the_allow_list_is_refused_at_once_and_counted(
    tmp_path: Path, clean: None
) -> None:
    """False failure: about 1e-5: a rejected connect returns in microseconds, measured in the
    service, against the bound of 0.5 s."""
    port = free_port()
    isolation = IsolationConfig(local_ports=[11211])
    with LocalArm(
        spec(port), port=port, cgroup=f"{PREFIX}a-{port}", isolation=isolation,
        log_path=tmp_path / "a.log",
    ).start() as arm:  # fmt: skip
        assert arm.url.startswith("http://10.213.")
        # The host's loopback has a server; from the namespace it is not reachable.
        with socket.create_server(("127.0.0.1", 0)) as listener:
            target = f"127.0.0.1:{listener.getsockname()[1]}"
            for _ in range(2):
                outcome, took_s = get(f"{arm.url}/connect?to={target}").split()
                assert outcome == "ConnectionRefusedError" and float(took_s) < 0.5
        # (http.server's own name lookup is refused and counted too: a real side effect.)
        assert arm.isolation_report()["denied"][target] == 2  # type: ignore[index]
    assert arm.isolation_report()["denied"][target] == 2  # type: ignore[index]


@needs_egress
def test_an_allowed_loopback_destination_is_relayed(tmp_path: Path, clean: None) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        target = f"127.0.0.1:{listener.getsockname()[1]}"
        port = free_port()
        isolation = IsolationConfig(allow=[target])
        with LocalArm(
            spec(port), port=port, cgroup=f"{PREFIX}b-{port}", isolation=isolation,
            log_path=tmp_path / "b.log",
        ).start() as arm:  # fmt: skip
            assert get(f"{arm.url}/connect?to={target}").split()[0] == "ok"
            report = arm.isolation_report()
        assert target not in report["denied"]  # type: ignore[operator]


@needs_egress
def test_a_post_through_the_egress_proxy_never_reaches_the_downstream(
    tmp_path: Path, clean: None, downstream: str
) -> None:
    port = free_port()
    isolation = IsolationConfig.model_validate(
        {"http": [{"address": downstream, "drop_body": '{"dropped": true}'}]}
    )
    with LocalArm(
        spec(port), port=port, cgroup=f"{PREFIX}c-{port}", isolation=isolation,
        log_path=tmp_path / "c.log",
    ).start() as arm:  # fmt: skip
        call = f"{arm.url}/call?url=http://{downstream}"
        assert get(f"{call}/items&method=GET") == "200 real"
        assert get(f"{call}/orders&method=POST") == '200 {"dropped": true}'
    assert Downstream.seen == ["GET /items"]
    relay = arm.isolation_report()["downstreams"][downstream]  # type: ignore[index]
    assert relay["forwarded"] == {"GET /items": 1}
    assert relay["dropped"] == {"POST /orders": 1}
    # The batch's metric rows (lab/runner): one per downstream endpoint written to.
    assert dropped_write_rows({"C": arm.isolation_report()}) == [
        ("C", f"dropped_writes[{downstream} POST /orders]", 1.0)
    ]
