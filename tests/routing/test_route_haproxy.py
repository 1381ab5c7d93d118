"""The routing fleet's HAProxy configuration: path ACLs per partition, weights for a split
host, accepted by `haproxy -c` (routing with real requests: test_route_fleet.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hairline.lb.launch import HAPROXY
from hairline.routing.balancer import BalancerSettings, realise
from hairline.routing.haproxy import haproxy_config, server_weights
from hairline.routing.partition import Partition, Partitioning

SERVERS = {f"s{i}": f"127.0.0.1:{9000 + i}" for i in range(1, 6)}
MANY = Partitioning(
    (
        Partition("p0", tuple(f"/api/op/{k}" for k in range(0, 80, 2)), (), 0.6),
        Partition("p1", tuple(f"/api/op/{k}" for k in range(1, 80, 2)), (), 0.4),
    )
)


def test_a_split_host_is_weighted_in_both_backends() -> None:
    placement = realise({"p0": 2.7, "p1": 2.3}, list(SERVERS), None, BalancerSettings())
    weights = server_weights(placement, ["p0", "p1"])
    # p0 has three hosts for 2.7, so it gives 0.3 of one to p1 (two hosts for 2.3).
    assert sorted(weights["p0"].values()) == [0, 0, 70, 100, 100]
    assert sorted(weights["p1"].values()) == [0, 0, 30, 100, 100]


def test_the_semantic_config_passes_haproxy_check(tmp_path: Path) -> None:
    if not HAPROXY.exists():
        pytest.skip("HAProxy is not installed")
    placement = realise({"p0": 3.0, "p1": 2.0}, list(SERVERS), None, BalancerSettings())
    text = haproxy_config(port=8999, socket_path=tmp_path / "admin.sock", servers=SERVERS,
                          partitioning=MANY, placement=placement)  # fmt: skip
    # 40 endpoints a partition: more than one `acl` line holds (HAProxy reads 64 words).
    assert text.count("acl is_p0 path") == 2
    assert "use_backend p1 if is_p1" in text and "default_backend any" in text
    assert "balance random(2)" in text
    config = tmp_path / "haproxy.cfg"
    config.write_text(text)
    done = subprocess.run([str(HAPROXY), "-c", "-f", str(config)], capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_round_robin_config_passes_haproxy_check(tmp_path: Path) -> None:
    if not HAPROXY.exists():
        pytest.skip("HAProxy is not installed")
    config = tmp_path / "haproxy.cfg"
    config.write_text(haproxy_config(port=8999, socket_path=tmp_path / "a.sock", servers=SERVERS))
    done = subprocess.run([str(HAPROXY), "-c", "-f", str(config)], capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "balance roundrobin" in config.read_text()
