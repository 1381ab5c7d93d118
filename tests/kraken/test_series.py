"""The fleet's scraped metrics: labelled by instance, current values as Prometheus's
staleness sees them, windows of samples, and memory bounded by retention."""

from __future__ import annotations

from hairline.kraken.series import Matcher, SeriesStore

FEED = 'requests_total{path="/api/feed"} %d\nrequests_total{path="/api/profile"} 5\n'


def test_each_series_is_labelled_with_its_instance() -> None:
    store = SeriesStore()
    store.add_scrape("web1", 0.0, FEED % 3)
    store.add_scrape("web2", 0.0, FEED % 4)
    feed = [Matcher("path", "=", "/api/feed")]
    assert store.instant("requests_total", feed, 0.0, ["web1", "web2"]) == {
        (("instance", "web1"), ("path", "/api/feed")): 3.0,
        (("instance", "web2"), ("path", "/api/feed")): 4.0,
    }
    # Only the instances asked for: a "server:web2" entity sees web2 alone.
    assert list(store.instant("requests_total", feed, 0.0, ["web2"]).values()) == [4.0]


def test_a_series_gone_from_the_latest_scrape_is_gone() -> None:
    store = SeriesStore(stale_after_s=5.0)
    store.add_scrape("web1", 0.0, "warm 1\nold_gauge 7\n")
    store.add_scrape("web1", 1.0, "warm 1\n")
    assert store.instant("old_gauge", [], 1.0, ["web1"]) == {}
    assert store.instant("old_gauge", [], 0.5, ["web1"]) == {(("instance", "web1"),): 7.0}
    # An instance not scraped for stale_after_s has no current values...
    assert store.instant("warm", [], 7.0, ["web1"]) == {}
    # ...but its samples stay in the windows that cover them.
    assert store.range_samples("old_gauge", [], 1.0, 2.0, ["web1"]) == {
        (("instance", "web1"),): [(0.0, 7.0)]
    }


def test_a_window_is_open_at_its_start_and_closed_at_its_end() -> None:
    store = SeriesStore()
    for at_s in (0.0, 0.5, 1.0, 1.5, 2.0):
        store.add_scrape("web1", at_s, f"queue {at_s * 10}\n")
    (window,) = store.range_samples("queue", [], 2.0, 1.0, ["web1"]).values()
    assert window == [(1.5, 15.0), (2.0, 20.0)]


def test_memory_is_bounded_by_retention() -> None:
    store = SeriesStore(retention_s=10.0)
    for tick in range(1000):
        store.add_scrape("web1", tick * 0.5, f"requests_total {tick}\nqueue 1\n")
    # 10 s of 0.5 s scrapes of two series, the scrape on the cut included.
    assert store.sample_count() == 2 * 21
