"""Whether a health query comes to one value, from its form alone: every key of the docs and
examples does; an unaggregated series, a ``by`` that keeps a label, buckets without their
quantile do not."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hairline.kraken.file import load_kraken_file
from hairline.kraken.promql import parse
from hairline.kraken.querycheck import several_values, shape_of, unknown_instances

DOCS = Path(__file__).resolve().parents[2] / "docs" / "kraken.md"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "kraken"


def documented_keys() -> list[str]:
    """The keys of docs/kraken.md's "Useful keys" table and its health file example."""
    text = DOCS.read_text()
    table = text.split("Useful keys on the sample service")[1].split("\n\n")[1]
    keys = re.findall(r"\| `([^`]+)` \|$", table, re.MULTILINE)
    assert len(keys) == 4
    return [*keys, *re.findall(r'^key = "([^"]+)"$', text, re.MULTILINE)[:1]]


@pytest.mark.parametrize("key", documented_keys())
def test_every_documented_key_gives_one_value(key: str) -> None:
    assert several_values(parse(key), servers=4) is None


def test_every_example_file_passes_its_checks() -> None:
    for path in sorted(EXAMPLES.glob("*.toml")):
        if "[test]" in path.read_text():
            assert load_kraken_file(path).health, path


@pytest.mark.parametrize(
    ("key", "per"),
    [
        ("rate(sample_requests_total[2s])", "server (4 servers under test)"),
        ("sum by (instance) (rate(sample_requests_total[2s]))", "server (instance)"),
        ("sum by (le) (rate(sample_work_seconds_bucket[2s]))", "histogram bucket (le)"),
        ("sum by (endpoint, status) (rate(sample_requests_total[2s]))", "endpoint, status"),
        ("1000 * sum by (instance) (rate(a[2s])) / sum by (instance) (rate(b[2s]))", "server"),
        ("-rate(a[2s]) * 2", "server (4 servers"),
    ],
)
def test_a_key_with_several_values_says_per_what_and_how_to_aggregate(key: str, per: str) -> None:
    problem = several_values(parse(key), servers=4)
    assert problem is not None
    what, fix = problem
    assert f"gives one value per {per}" in what
    assert "sum(...)" in fix or "histogram_quantile" in fix


def test_the_labels_a_query_keeps() -> None:
    assert shape_of(parse("2 * 3")).vector is False
    assert shape_of(parse("rate(x[2s])")).labels is None  # a series' own labels
    assert shape_of(parse("sum by (a, le) (x)")).labels == {"a", "le"}
    assert shape_of(parse("histogram_quantile(0.5, sum by (a, le) (x))")).labels == {"a"}
    assert shape_of(parse("sum by (a) (sum(x))")).labels == frozenset()  # nothing to keep
    assert shape_of(parse("sum(x) / rate(y[2s])")).labels == frozenset()  # matched one to one


def test_over_one_server_its_instance_label_parts_nothing() -> None:
    assert several_values(parse("rate(x[2s])"), servers=1) is None
    assert several_values(parse("sum by (instance) (rate(x[2s]))"), servers=1) is None
    assert several_values(parse("sum by (endpoint) (rate(x[2s]))"), servers=1) is not None


def test_instance_matchers_are_checked_against_the_servers_read() -> None:
    key = 'sum(rate(a{instance="web1"}[2s])) / sum(rate(b{instance="web9", x!="y"}[2s]))'
    assert unknown_instances(parse(key), ("web1", "web2")) == ["web9"]
    # A regular expression or a negation may match none on purpose: not judged.
    assert unknown_instances(parse('sum(a{instance=~"web9|web1"})'), ("web1",)) == []
    assert unknown_instances(parse('sum(a{instance!="web9"})'), ("web1",)) == []
