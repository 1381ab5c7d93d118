"""Load-balancer weights: the share arithmetic, and HAProxy's runtime API on a real HAProxy."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from hairline.errors import LoadBalancerError, LoadBalancerGone
from hairline.kraken.fleet import LocalFleet
from hairline.lb.balancer import MAX_WEIGHT, share_of, weights_for_share
from hairline.lb.haproxy import HAProxyRuntime

WEB = ("web1", "web2", "web3", "web4")


def test_weights_give_the_share_asked_for_within_a_fifth_of_a_point() -> None:
    """False failure: none: a seeded rng draws the same inputs on every run, and the property holds
    for every input."""
    rng = np.random.default_rng(7)
    for share in [0.05, 0.15, 0.4, 0.5, 0.93, 0.95, *rng.uniform(0.05, 0.95, 200)]:
        for sut, others in [(WEB, ("rest",)), (("web1",), ("web2", "web3", "rest"))]:
            weights = weights_for_share(sut, others, share)
            assert all(0 <= w <= MAX_WEIGHT for w in weights.values())
            assert share_of(weights, sut) == pytest.approx(share, abs=0.002)
            # Each group's servers are weighted alike, so round robin spreads it evenly.
            assert len({weights[s] for s in sut}) == 1
            assert len({weights[s] for s in others}) == 1


@pytest.mark.parametrize("share", [0.001, 0.01, 0.3333, 0.99, 0.999])
def test_no_integer_weights_come_closer(share: float) -> None:
    got = share_of(weights_for_share(WEB, ("rest",), share), WEB)
    best = min(
        abs(4 * a / (4 * a + b) - share)
        for a in range(MAX_WEIGHT + 1)
        for b in range(MAX_WEIGHT + 1)
        if a + b
    )
    assert abs(got - share) == pytest.approx(best, abs=1e-9)


def test_all_or_nothing_drains_one_side() -> None:
    assert weights_for_share(WEB, ("rest",), 1.0) == {**dict.fromkeys(WEB, 256), "rest": 0}
    assert weights_for_share(WEB, ("rest",), 0.0) == {**dict.fromkeys(WEB, 0), "rest": 256}


def test_a_share_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ValueError, match="share"):
        weights_for_share(WEB, ("rest",), 1.2)


@pytest.fixture
def lb(kraken_fleet: LocalFleet) -> Iterator[HAProxyRuntime]:
    runtime = HAProxyRuntime(kraken_fleet.socket_path, kraken_fleet.backend)
    yield runtime
    runtime.set_weights(kraken_fleet.original_weights)


def test_haproxy_weights_are_read_and_set_together(
    lb: HAProxyRuntime, kraken_fleet: LocalFleet
) -> None:
    assert lb.weights() == kraken_fleet.original_weights
    lb.set_weights({"web1": 0, "web2": 200, "rest": 7})
    assert lb.weights() == {**kraken_fleet.original_weights, "web1": 0, "web2": 200, "rest": 7}
    assert lb.addresses() == kraken_fleet.addresses


def test_an_unknown_server_is_an_error_naming_the_socket_and_the_field(
    lb: HAProxyRuntime,
) -> None:
    with pytest.raises(LoadBalancerError, match="No such server") as caught:
        lb.set_weights({"web9": 3})
    assert str(lb.socket_path) in caught.value.message
    assert caught.value.hint is not None and "[test] servers" in caught.value.hint


def test_an_unknown_backend_is_an_error(kraken_fleet: LocalFleet) -> None:
    with pytest.raises(LoadBalancerError, match="backend"):
        HAProxyRuntime(kraken_fleet.socket_path, "nope").weights()


def test_weights_outside_haproxys_range_are_refused_before_sending(lb: HAProxyRuntime) -> None:
    with pytest.raises(LoadBalancerError, match=r"0\.\.256"):
        lb.set_weights({"web1": 300})


def test_an_unreachable_socket_names_itself_and_the_lb_field(tmp_path: Path) -> None:
    missing = tmp_path / "admin.sock"
    with pytest.raises(LoadBalancerError, match="cannot reach") as caught:
        HAProxyRuntime(missing, "web").weights()
    assert str(missing) in caught.value.message
    assert caught.value.hint is not None and "level admin" in caught.value.hint


def test_a_socket_nothing_listens_on_is_a_balancer_gone(tmp_path: Path) -> None:
    """A killed HAProxy leaves its socket file, which then refuses connections: the
    watchdog gives up on it at once (kraken/watchdog.py), as on a missing file."""
    import socket

    path = tmp_path / "admin.sock"
    with pytest.raises(LoadBalancerGone):
        HAProxyRuntime(path, "web").weights()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as left_behind:
        left_behind.bind(str(path))  # bound, never listening: as after a SIGKILL
        with pytest.raises(LoadBalancerGone, match="Connection refused"):
            HAProxyRuntime(path, "web").set_weights({"web1": 1})


def test_the_rest_keeps_its_own_proportions() -> None:
    # A server test of web1: web2..web4 and the rest of the region share what web1 does not
    # as they did before (10:10:10:160), so that no other web server is flooded.
    others = {"web2": 10, "web3": 10, "web4": 10, "rest": 160}
    for share in (0.05, 0.2, 0.35, 0.6):
        weights = weights_for_share(("web1",), others, share)
        assert share_of(weights, ("web1",)) == pytest.approx(share, abs=0.002)
        assert weights["rest"] == pytest.approx(16 * weights["web2"], rel=0.1)
        assert weights["web2"] == weights["web3"] == weights["web4"] >= 1
