"""An arm's network namespace: only the allow-list goes out, the rest is refused and counted.

The namespace tests need root (``ip netns``, nftables); they skip with the reason elsewhere.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hairline.arms.netns import (
    ArmNamespace,
    leftovers,
    namespace_rules,
    netns_available,
    sweep_namespaces,
)
from hairline.config.isolation import IsolationConfig

PREFIX = "hltestnetns-"
needs_netns = pytest.mark.skipif(
    bool(reason := netns_available()), reason=f"network namespaces unavailable: {reason}"
)


def run(*args: str) -> str:
    return subprocess.run(list(args), capture_output=True, text=True, check=False).stdout


def connect_from(namespace: str, host: str, port: int) -> tuple[str, float]:
    """Connect from inside ``namespace``: "ok" or the error, and how long it took (s)."""
    probe = (
        "import socket, sys, time\n"
        "t = time.monotonic()\n"
        "try:\n"
        f"    socket.create_connection(({host!r}, {port}), timeout=5).close(); print('ok')\n"
        "except OSError as e:\n"
        "    print(type(e).__name__)\n"
        "print(time.monotonic() - t)\n"
    )
    out = run("ip", "netns", "exec", namespace, sys.executable, "-c", probe).split()
    return out[0], float(out[1])


@pytest.fixture
def clean() -> Iterator[None]:
    sweep_namespaces(PREFIX)
    yield
    sweep_namespaces(PREFIX)
    assert leftovers(PREFIX) == []


def test_rules_let_out_the_allow_list_and_count_the_rest() -> None:
    isolation = IsolationConfig.model_validate(
        {
            "allow": ["127.0.0.1:5432", "10.0.0.5:6379"],
            "local_ports": [11211],
            "http": [{"address": "127.0.0.1:9000"}],
        }
    )
    rules = namespace_rules(isolation, port=8080, veth="v0", host_address="10.213.7.1")
    assert 'oifname "lo" tcp dport { 8080, 11211 } accept' in rules
    assert 'oifname "lo" ip daddr . tcp dport { 127.0.0.1 . 5432, 127.0.0.1 . 9000 }' in rules
    assert 'oifname "v0" ip daddr . tcp dport { 10.0.0.5 . 6379 } accept' in rules
    assert 'iifname "v0" ip saddr 10.213.7.1 tcp dport 8080 accept' in rules
    assert "add @denied4 { ip daddr . tcp dport } reject with tcp reset" in rules


@needs_netns
def test_a_denied_destination_is_refused_at_once_and_counted(clean: None) -> None:
    """False failure: about 1e-5: a rejected connect returns in microseconds, measured inside the
    probe (not its start-up), against the bound of 0.5 s."""
    isolation = IsolationConfig(allow=["127.0.0.1:5432"], local_ports=[11211])
    with ArmNamespace(PREFIX + "a-8080", isolation, port=8080) as ns:
        for _ in range(3):
            outcome, took_s = connect_from(ns.name, "127.0.0.1", 6379)
            assert outcome == "ConnectionRefusedError" and took_s < 0.5
        # Allowed, and nothing listens: refused by the kernel, not counted as denied.
        assert connect_from(ns.name, "127.0.0.1", 5432)[0] == "ConnectionRefusedError"
        assert connect_from(ns.name, "10.9.9.9", 80)[0] == "ConnectionRefusedError"
        assert ns.denied() == {"127.0.0.1:6379": 3, "10.9.9.9:80": 1}
    assert ns.denied() == {"127.0.0.1:6379": 3, "10.9.9.9:80": 1}  # the last reading


@needs_netns
def test_the_host_reaches_the_service_port_only(clean: None) -> None:
    """False failure: about 1e-6: a Python server in the namespace must listen within 5 s."""
    isolation = IsolationConfig(local_ports=[11211])
    with ArmNamespace(PREFIX + "b-8081", isolation, port=8081) as ns:
        server = subprocess.Popen(
            ["ip", "netns", "exec", ns.name, sys.executable, "-c",
             "import socket, time\n"
             "held = [socket.create_server(('0.0.0.0', p)) for p in (8081, 8082, 11211)]\n"
             "time.sleep(30)\n"],
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                try:
                    socket.create_connection((ns.address, 8081), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.05)
            else:
                pytest.fail("the service's port never answered from the host")
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection((ns.address, 8082), timeout=2)
            # The service's own processes reach each other on their local ports.
            assert connect_from(ns.name, "127.0.0.1", 11211)[0] == "ok"
            assert connect_from(ns.name, "127.0.0.1", 8082)[0] == "ConnectionRefusedError"
        finally:
            server.kill()
            server.wait()


@needs_netns
def test_remove_and_sweep_leave_nothing_behind(clean: None) -> None:
    isolation = IsolationConfig(allow=["10.0.0.5:6379"])  # a host table for masquerading
    kept = ArmNamespace(PREFIX + "c-1", isolation, port=8083).create()
    ArmNamespace(PREFIX + "d-2", isolation, port=8084).create()  # a dead processor's
    assert len(leftovers(PREFIX)) == 6  # two namespaces, two host veths, two host tables
    kept.remove()
    kept.remove()
    assert len(leftovers(PREFIX)) == 3
    assert sweep_namespaces(PREFIX) != []
    assert leftovers(PREFIX) == []


@needs_netns
def test_forwarding_is_on_while_a_namespace_needs_it_and_restored_after(clean: None) -> None:
    ip_forward = Path("/proc/sys/net/ipv4/ip_forward")
    was = ip_forward.read_text()
    ip_forward.write_text("0\n")
    try:
        isolation = IsolationConfig(allow=["10.0.0.5:6379"])  # another machine: forwarded
        first = ArmNamespace(PREFIX + "f-1", isolation, port=8086).create()
        second = ArmNamespace(PREFIX + "g-2", isolation, port=8087).create()
        first.remove()
        assert ip_forward.read_text().strip() == "1"  # the second still needs it
        sweep_namespaces(PREFIX)  # the second as a dead processor left it
        assert ip_forward.read_text().strip() == "0"
        second.remove()
        assert ip_forward.read_text().strip() == "0"
    finally:
        ip_forward.write_text(was)


@needs_netns
def test_a_creation_that_fails_halfway_removes_what_it_made(clean: None) -> None:
    ns = ArmNamespace(PREFIX + "e-8085", IsolationConfig(), port=8085)
    # The host side's name taken: the veth pair cannot be made after the namespace was.
    run("ip", "link", "add", ns.host_veth, "type", "veth", "peer", "name", "hltestpeer")
    try:
        with pytest.raises(Exception, match="failed"):
            ns.create()
        assert PREFIX + "e-8085" not in run("ip", "netns", "list")
    finally:
        run("ip", "link", "del", ns.host_veth)


@needs_netns
def test_probes_at_once_in_one_folder_each_find_namespaces() -> None:
    """Two pytest workers in one clone probed under one name at once, and the second read
    "File exists" as "no namespaces here" (a suite skipped a test for it, 2026-11-29)."""
    with ThreadPoolExecutor(max_workers=6) as pool:
        answers = list(pool.map(lambda _: netns_available(), range(12)))
    assert answers == [""] * 12
    assert not [n for n in run("ip", "netns", "list").split() if n.startswith("hlprobe-")]
