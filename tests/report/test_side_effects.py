"""The report's side-effect notes, per arm over every batch attempt, as docs/safety.md
promises them: refused connections, writes the egress proxy answered, requests it
forwarded, the connections through it and its upstream errors."""

from __future__ import annotations

from typing import Any

from hairline.report.experiment import side_effect_notes


def attempt(arm: str, *, denied: dict[str, int] | None = None,
            relay: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """One batch attempt's record with one isolated arm, shaped as arms/isolation.py's
    ``report()`` writes it."""
    downstreams = {"127.0.0.1:9000": {"mode": "http", **relay}} if relay is not None else {}
    return {"isolation": {arm: {"namespace": "hl-x", "denied": denied or {},
                                "downstreams": downstreams}}}  # fmt: skip


def test_refusals_drops_forwards_connections_and_errors_are_summed_over_attempts() -> None:
    relay = {"connections": 3, "upstream_errors": 1,
             "forwarded": {"GET /v1/user": 40}, "dropped": {"POST /v1/order": 5}}  # fmt: skip
    records = [
        attempt("B", denied={"127.0.0.1:6379": 2}, relay=relay),
        attempt("B", denied={"127.0.0.1:6379": 1}, relay={**relay, "upstream_errors": 0}),
    ]
    assert side_effect_notes(records) == [
        "side effects of arm B: 3 connections refused (127.0.0.1:6379: 3); "
        "10 writes dropped by the egress proxy (127.0.0.1:9000 POST /v1/order: 10); "
        "80 requests forwarded to downstreams (127.0.0.1:9000 GET /v1/user: 80); "
        "6 connections through the egress proxy, 1 upstream error (a downstream refused, "
        "unreachable within 2 s or silent for 30 s)"
    ]


def test_an_arm_whose_proxy_carried_nothing_has_no_note() -> None:
    quiet = {"connections": 0, "upstream_errors": 0, "forwarded": {}, "dropped": {}}
    assert side_effect_notes([attempt("A", relay=quiet), {"isolation": {}}, {}]) == []


def test_a_tcp_relay_counts_connections_without_endpoints() -> None:
    tcp = {"connections": 4, "upstream_errors": 0}
    assert side_effect_notes([attempt("A", relay=tcp)]) == [
        "side effects of arm A: 4 connections through the egress proxy, 0 upstream errors"
    ]
