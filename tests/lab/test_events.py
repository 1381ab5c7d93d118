"""Events beside experiments: times as people write them, and refusals that say the fix."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hairline.errors import ConfigError
from hairline.lab.events import add_event, list_events, parse_time
from hairline.store.db import Store

NOW_S = 1_700_000_000.0


def test_times_are_now_an_offset_or_iso_8601() -> None:
    assert parse_time("now", now_s=NOW_S) == NOW_S
    assert parse_time("-15m", now_s=NOW_S) == NOW_S - 900
    assert parse_time("+1.5h", now_s=NOW_S) == NOW_S + 5400
    assert parse_time("-2d", now_s=NOW_S) == NOW_S - 172_800
    at = datetime(2024, 5, 1, 12, 30, tzinfo=UTC)
    assert parse_time("2024-05-01T12:30:00+00:00", now_s=NOW_S) == at.timestamp()
    assert parse_time("2024-05-01T12:30:00Z", now_s=NOW_S) == at.timestamp()
    # Without a zone: this machine's local time, as someone at its console means it.
    naive = datetime(2024, 5, 1, 12, 30)
    assert parse_time("2024-05-01 12:30", now_s=NOW_S) == naive.timestamp()


@pytest.mark.parametrize("text", ["yesterday", "15m", "-15 minutes", "2024-13-01"])
def test_a_time_that_is_not_one_names_the_flag_and_the_formats(text: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_time(text, now_s=NOW_S, flag="--until")
    assert f"--until {text!r} is not a time" in err.value.message
    assert err.value.hint is not None and "ISO 8601" in err.value.hint and "-15m" in err.value.hint


def test_events_are_recorded_and_listed_newest_first(store: Store) -> None:
    first = add_event(store, "deploy", service="search", started_at=100.0, note="v1.2")
    second = add_event(store, "maintenance", service="rack-4", host="w1", started_at=200.0,
                       ended_at=260.0, created_by="ops-token")  # fmt: skip
    assert [e.id for e in list_events(store)] == [second.id, first.id]
    assert (second.host, second.ended_at, second.created_by) == ("w1", 260.0, "ops-token")
    # Since 150 s: the point at 100 s is over, the maintenance until 260 s is not.
    assert [e.id for e in list_events(store, since_s=150.0)] == [second.id]


def test_a_bad_event_is_refused_with_every_problem(store: Store) -> None:
    with pytest.raises(ConfigError) as err:
        add_event(store, "reboot", service=" ", started_at=10.0, ended_at=5.0)
    message = err.value.message
    assert "kind 'reboot' is not one of deploy, maintenance, other" in message
    assert "service is empty" in message and "ends (--until) before it starts (--at)" in message
    assert list_events(store) == []
