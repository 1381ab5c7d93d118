"""Health metrics: Kraken's Figure 4 as a health file, the level of a window of samples, and
every bad file an error that names the field and its fix."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from hairline.errors import ConfigError
from hairline.kraken.health import HealthMetric, Level, level_of, load_health_file
from hairline.kraken.promql import Aggregate

# Figure 4: web error rate, a 4 minute window, 40% of the samples.
FIGURE_4 = """\
[metric.web_error_rate]
entity = "engine"
key = "error_rate"
time_window = "4m"
sample_fraction = 0.4

[metric.web_error_rate.level_ranges]
BOLD = [0.0, 0.00035]
MODERATE = [0.00035, 0.0004]
CAUTIOUS = [0.0004, 0.00045]
NOMORE = [0.00045, 0.0005]
BACKOFF = [0.0005, 0.001]
"""

QUEUE_DELAY = """\
[metric.queue_delay]
entity = "cluster"
key = "1000 * sum(rate(sample_queue_seconds_sum[2s])) / sum(rate(sample_queue_seconds_count[2s]))"
time_window = "6s"
sample_fraction = 0.4

[metric.queue_delay.level_ranges]
BOLD = [0, 10]
MODERATE = [10, 15]
CAUTIOUS = [15, 18]
NOMORE = [18, 20]
BACKOFF = [20, inf]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "health.toml"
    path.write_text(text)
    return path


@pytest.fixture
def error_rate(tmp_path: Path) -> HealthMetric:
    (metric,) = load_health_file(write(tmp_path, FIGURE_4))
    return metric


def test_figure_4_loads_with_its_threshold_at_nomore(error_rate: HealthMetric) -> None:
    assert error_rate.name == "web_error_rate"
    assert error_rate.time_window_s == 240.0
    assert error_rate.threshold == 0.00045
    assert error_rate.ranges[Level.BACKOFF] == (0.0005, 0.001)
    assert error_rate.query is None  # the engine reports it; no query


def test_a_cluster_metric_keeps_its_parsed_query(tmp_path: Path) -> None:
    (metric,) = load_health_file(write(tmp_path, QUEUE_DELAY))
    assert metric.entity == "cluster"
    assert metric.ranges[Level.BACKOFF] == (20.0, math.inf)
    assert metric.query is not None and not isinstance(metric.query, Aggregate)


def test_level_is_the_highest_that_sample_fraction_of_samples_reach(
    error_rate: HealthMetric,
) -> None:
    healthy = [0.0001] * 10
    assert level_of(error_rate, healthy) == Level.BOLD
    # 4 of 10 samples at NOMORE or above: 40% is enough for NOMORE.
    assert level_of(error_rate, [0.0001] * 6 + [0.00047] * 4) == Level.NOMORE
    # 3 of 10 are not; they do count towards the levels below (CAUTIOUS starts at 0.0004).
    assert level_of(error_rate, [0.0001] * 6 + [0.00047] * 3 + [0.00041]) == Level.CAUTIOUS
    # A single spike above BACKOFF's start does not make the window BACKOFF.
    assert level_of(error_rate, [0.0001] * 9 + [0.01]) == Level.BOLD
    assert level_of(error_rate, [0.0006] * 5 + [0.0001] * 5) == Level.BACKOFF


def test_a_window_without_samples_is_unhealthy(error_rate: HealthMetric) -> None:
    assert level_of(error_rate, []) is None
    assert level_of(error_rate, [math.nan]) is None


def test_sample_fraction_zero_takes_the_worst_sample(tmp_path: Path) -> None:
    (metric,) = load_health_file(write(tmp_path, FIGURE_4.replace("0.4", "0.0")))
    assert level_of(metric, [0.0001] * 9 + [0.00042]) == Level.CAUTIOUS


def problems_of(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_health_file(write(tmp_path, text))
    return str(caught.value)


def test_overlapping_ranges_name_the_level_and_the_fix(tmp_path: Path) -> None:
    text = QUEUE_DELAY.replace("CAUTIOUS = [15, 18]", "CAUTIOUS = [14, 18]")
    message = problems_of(tmp_path, text)
    assert "health.toml:10: metric.queue_delay.level_ranges.CAUTIOUS:" in message
    assert "overlaps MODERATE's [10.0, 15.0)" in message
    assert "fix: start CAUTIOUS where MODERATE ends (15.0)" in message


def test_ranges_out_of_order_or_with_a_gap(tmp_path: Path) -> None:
    text = QUEUE_DELAY.replace("CAUTIOUS = [15, 18]", "CAUTIOUS = [5, 18]")
    assert "CAUTIOUS: [5.0, ...) is out of order with MODERATE's" in problems_of(tmp_path, text)
    text = QUEUE_DELAY.replace("CAUTIOUS = [15, 18]", "CAUTIOUS = [16, 18]")
    assert "a gap between MODERATE's end (15.0) and CAUTIOUS's start (16.0)" in problems_of(
        tmp_path, text
    )


def test_unknown_and_missing_levels(tmp_path: Path) -> None:
    message = problems_of(tmp_path, FIGURE_4.replace("BACKOFF =", "BACKOF ="))
    assert "metric.web_error_rate.level_ranges.BACKOF: unknown level 'BACKOF'" in message
    assert "did you mean 'BACKOFF'?" in message
    assert "metric.web_error_rate.level_ranges: missing level BACKOFF" in message


def test_sample_fraction_outside_0_1(tmp_path: Path) -> None:
    message = problems_of(tmp_path, FIGURE_4.replace("0.4", "1.5"))
    assert "health.toml:5: metric.web_error_rate.sample_fraction: 1.5 is outside [0, 1]" in message
    assert "fix: write the fraction of the window's samples, e.g. 0.4" in message


def test_bad_window_entity_and_keys(tmp_path: Path) -> None:
    message = problems_of(tmp_path, FIGURE_4.replace('"4m"', '"4 minutes"'))
    assert "metric.web_error_rate.time_window: '4 minutes' is not a time window" in message
    message = problems_of(tmp_path, FIGURE_4.replace('"engine"', '"region"'))
    assert "metric.web_error_rate.entity: unknown entity 'region'" in message
    message = problems_of(tmp_path, FIGURE_4.replace('"error_rate"', '"error_rates"'))
    assert "did you mean 'error_rate'?" in message
    message = problems_of(tmp_path, QUEUE_DELAY.replace("sum(rate(", "sum(rat(", 1))
    assert "metric.queue_delay.key: query" in message
    assert "column 12: unknown function 'rat'" in message


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    text = FIGURE_4.replace("0.4", "-1\ncolour = 3").replace('"4m"', '"forever"')
    message = problems_of(tmp_path, text)
    assert message.startswith(f"{tmp_path / 'health.toml'}: 3 problems")
    assert "metric.web_error_rate.colour: unknown field" in message


def test_a_table_of_the_wrong_shape(tmp_path: Path) -> None:
    message = problems_of(tmp_path, FIGURE_4.replace('"4m"', "[4]"))
    assert "metric.web_error_rate.time_window" in message
    assert problems_of(tmp_path, "").endswith(
        "metric: no metrics\n    fix: add a [metric.NAME] table\n"
        '  hint: fix each line above; docs/kraken.md, "Health metrics", describes the file'
    )
