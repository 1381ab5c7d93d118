"""The PromQL subset of health metric keys, evaluated over scrapes of a small fleet: rates
over counters that reset, histogram quantiles checked by hand, sums by label, and errors
that point at the column."""

from __future__ import annotations

import math

import pytest

from hairline.errors import ConfigError
from hairline.kraken.promql import evaluate, longest_range_s, parse
from hairline.kraken.series import SeriesStore

FLEET = ("web1", "web2")


def value(
    query: str, store: SeriesStore, at_s: float, instances: tuple[str, ...] = FLEET
) -> float | None:
    return evaluate(parse(query), store, at_s, instances)


def test_rate_counts_a_counter_reset_as_a_restart_from_zero() -> None:
    store = SeriesStore()
    # web1's process restarts between 2 s and 3 s: its counter goes 20 -> 5.
    for at_s, count in enumerate([0, 10, 20, 5, 15]):
        store.add_scrape("web1", float(at_s), f"requests_total {count}\n")
    # 10 + 10 + 5 + 10 requests in the 4 s between the first and last sample in the window.
    assert value("increase(requests_total[10s])", store, 4.0) == 35.0
    assert value("rate(requests_total[10s])", store, 4.0) == pytest.approx(35.0 / 4)
    # A 2.5 s window holds the samples at 2, 3 and 4 s: 5 + 10 in 2 s.
    assert value("rate(requests_total[2500ms])", store, 4.0) == pytest.approx(7.5)


def test_a_rate_needs_two_scrapes_in_its_window() -> None:
    store = SeriesStore()
    store.add_scrape("web1", 0.0, "requests_total 3\n")
    assert value("rate(requests_total[5s])", store, 0.0) is None
    assert value("sum(rate(requests_total[5s]))", store, 0.0) is None
    assert value("no_such_metric", store, 0.0) is None


HISTOGRAM = """\
sample_queue_seconds_bucket{le="0.001"} %d
sample_queue_seconds_bucket{le="0.002"} %d
sample_queue_seconds_bucket{le="0.005"} %d
sample_queue_seconds_bucket{le="+Inf"} %d
sample_queue_seconds_sum %f
sample_queue_seconds_count %d
"""


def test_histogram_quantile_interpolates_within_the_bucket_as_prometheus_does() -> None:
    store = SeriesStore()
    store.add_scrape("web1", 0.0, HISTOGRAM % (0, 0, 0, 0, 0.0, 0))
    # In 1 s: 10 requests under 1 ms, 20 in (1, 2] ms, 60 in (2, 5] ms, 10 above 5 ms.
    store.add_scrape("web1", 1.0, HISTOGRAM % (10, 30, 90, 100, 0.3, 100))
    query = "histogram_quantile(%s, sum by (le) (rate(sample_queue_seconds_bucket[2s])))"
    # The median is rank 50: 20 into the (2, 5] ms bucket's 60, so 2 + 3 * 20/60 = 3 ms.
    assert value(query % "0.5", store, 1.0) == pytest.approx(0.003)
    # Rank 5 is half way into the first bucket, which starts at 0.
    assert value(query % "0.05", store, 1.0) == pytest.approx(0.0005)
    # Rank 99 falls in +Inf: the highest finite bound is all a histogram can say.
    assert value(query % "0.99", store, 1.0) == pytest.approx(0.005)
    # The mean, the way the queue delay metric computes it, in ms.
    mean = (
        "1000 * sum(rate(sample_queue_seconds_sum[2s])) / sum(rate(sample_queue_seconds_count[2s]))"
    )
    assert value(mean, store, 1.0) == pytest.approx(3.0)


def test_no_requests_is_no_data_not_a_division_by_zero() -> None:
    store = SeriesStore()
    store.add_scrape("web1", 0.0, HISTOGRAM % (0, 0, 0, 0, 0.0, 0))
    store.add_scrape("web1", 1.0, HISTOGRAM % (0, 0, 0, 0, 0.0, 0))
    assert (
        value(
            "sum(rate(sample_queue_seconds_sum[2s])) / sum(rate(sample_queue_seconds_count[2s]))",
            store,
            1.0,
        )
        is None
    )
    assert (
        value("histogram_quantile(0.5, rate(sample_queue_seconds_bucket[2s]))", store, 1.0) is None
    )


def scrape_fleet(
    store: SeriesStore, at_s: float, ok: tuple[int, int], errors: tuple[int, int]
) -> None:
    for server, good, bad in zip(FLEET, ok, errors, strict=True):
        store.add_scrape(
            server,
            at_s,
            f'http_requests_total{{code="200"}} {good}\nhttp_requests_total{{code="503"}} {bad}\n',
        )


def test_sum_by_a_label_and_the_error_rate_of_the_cluster() -> None:
    store = SeriesStore()
    scrape_fleet(store, 0.0, ok=(0, 0), errors=(0, 0))
    scrape_fleet(store, 2.0, ok=(90, 100), errors=(10, 0))
    error_rate = (
        'sum(rate(http_requests_total{code=~"5.."}[5s])) / sum(rate(http_requests_total[5s]))'
    )
    assert value(error_rate, store, 2.0) == pytest.approx(10 / 200)
    # One server alone (entity "server:web1").
    assert value(error_rate, store, 2.0, ("web1",)) == pytest.approx(0.1)
    assert value('sum by (code) (http_requests_total{code="503"})', store, 2.0) == 10.0
    assert value("max(sum by (instance) (http_requests_total))", store, 2.0) == 100.0
    assert value("min(sum by (instance) (http_requests_total))", store, 2.0) == 100.0
    assert value('avg(http_requests_total{code!="503"})', store, 2.0) == 95.0
    assert value("-sum(http_requests_total) + 2 * 100", store, 2.0) == 0.0


def test_two_vectors_match_on_their_labels() -> None:
    store = SeriesStore()
    scrape_fleet(store, 0.0, ok=(50, 30), errors=(5, 0))
    errors = 'sum by (instance) (http_requests_total{code="503"})'
    per_server = f"{errors} / sum by (instance) (http_requests_total)"
    assert value(f"max({per_server})", store, 0.0) == pytest.approx(5 / 55)


def test_max_passes_over_a_server_without_requests() -> None:
    store = SeriesStore()
    # web2 is drained: its mean queueing delay is 0 / 0.
    for at_s, (web1, web2) in enumerate([((0, 0.0), (5, 0.5)), ((100, 2.0), (5, 0.5))]):
        for server, (count, total_s) in (("web1", web1), ("web2", web2)):
            store.add_scrape(server, float(at_s), f"q_sum {total_s}\nq_count {count}\n")
    worst = "1000 * max(rate(q_sum[2s]) / rate(q_count[2s]))"
    assert value(worst, store, 1.0) == pytest.approx(20.0)
    assert value(worst, store, 1.0, ("web2",)) is None


def test_a_query_of_several_values_asks_to_aggregate() -> None:
    store = SeriesStore()
    scrape_fleet(store, 0.0, ok=(1, 2), errors=(0, 0))
    with pytest.raises(ConfigError) as caught:
        value('http_requests_total{code="200"}', store, 0.0)
    assert "query gives 2 values, not one" in str(caught.value)
    assert 'instance="web1"' in str(caught.value)
    assert "wrap it in sum(...), avg(...) or max(...)" in str(caught.value)


@pytest.mark.parametrize(
    ("query", "column", "problem"),
    [
        ("sum(rate(x))", 10, "rate() needs one range selector such as x[5s]"),
        ("x[5s] + 1", 1, "a range selector is allowed only inside rate"),
        ("1 +", 4, "expected a number, a metric or a function, found the end"),
        ('x{a~"b"}', 4, "unexpected '~'"),
        ('x{code="5"', 11, "expected ',' or '}'"),
        ("quantile(0.5, x)", 1, "unknown function 'quantile'"),
        ("rate(x[5 s])", 8, "expected a duration such as 500ms, 5s or 1m"),
        ("x > 1", 3, "'>' is not in the subset"),
        ("sum(1)", 5, "sum() needs a vector, not a number"),
        ("histogram_quantile(x, y)", 20, "the quantile must be a number"),
        ("(x + 1", 7, "expected ')', found the end"),
        ('x{a=~"("}', 6, "bad regular expression"),
    ],
)
def test_errors_name_the_column(query: str, column: int, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(query)
    assert f"query {query!r}: column {column}: {problem}" in str(caught.value)
    assert "docs/kraken.md" in str(caught.value)


def test_regular_expressions_match_the_whole_value() -> None:
    store = SeriesStore()
    store.add_scrape("web1", 0.0, 'x{path="/api/feed"} 1\nx{path="/api/feed/2"} 2\n')
    assert value('x{path=~"/api/feed"}', store, 0.0) == 1.0
    assert value('sum(x{path!~"/api/.*"})', store, 0.0) is None


def test_longest_range_says_what_the_store_must_keep() -> None:
    query = parse("sum(rate(a[2s])) / sum(rate(b[1m])) + max_over_time(c[500ms])")
    assert longest_range_s(query) == 60.0
    assert longest_range_s(parse("sum(a)")) == 0.0
    assert math.isinf(value("1 / 0", SeriesStore(), 0.0) or 0.0)
