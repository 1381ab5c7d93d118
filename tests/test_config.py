"""Thresholds and directions parsed at the edge, with errors that say what to write."""

from __future__ import annotations

import pytest

from hairline.config import Threshold, parse_directions, parse_threshold, parse_thresholds
from hairline.errors import ConfigError


def test_percent_is_a_relative_fraction_and_a_bare_number_is_absolute() -> None:
    assert parse_threshold("1%") == Threshold(0.01, relative=True)
    assert parse_threshold(" 0.5 % ") == Threshold(0.005, relative=True)
    assert parse_threshold("0.2") == Threshold(0.2, relative=False)
    assert str(Threshold(0.005, relative=True)) == "0.5%"


@pytest.mark.parametrize("text", ["fast", "-1%", "nan", "%"])
def test_bad_thresholds_name_the_value_and_say_what_to_write(text: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_threshold(text, source="--threshold cpu")
    assert "--threshold cpu" in err.value.message
    assert err.value.hint


def test_every_bad_threshold_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as err:
        parse_thresholds(["cpu=1%", "mem", "p99=slow"])
    assert "'mem'" in err.value.message and "'slow'" in err.value.message


def test_directions_accept_short_forms() -> None:
    assert parse_directions(["throughput=lower", "cpu=higher-is-worse"]) == {
        "throughput": "lower-is-worse",
        "cpu": "higher-is-worse",
    }
    with pytest.raises(ConfigError, match="not a direction"):
        parse_directions(["cpu=up"])
