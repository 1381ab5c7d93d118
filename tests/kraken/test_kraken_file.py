"""Kraken test files: the example of docs/kraken.md read into typed tables and a policy, and
every problem of the test file and its health file reported in one round."""

from __future__ import annotations

from pathlib import Path

import pytest

from hairline.errors import ConfigError
from hairline.kraken.file import KrakenTest, check_servers, load_kraken_file
from hairline.kraken.health import Level
from hairline.kraken.run import plan_of
from hairline.lb.balancer import LbSpec

KRAKEN = """\
health = "health.toml"

[test]
kind = "cluster"
servers = ["web1", "web2", "web3", "web4"]
control_interval_s = 2.0
sample_interval_s = 0.5
max_duration_s = 300
start_share = 0.4
hold_intervals = 3
max_backoffs = 2
steps = { BOLD = 0.15, MODERATE = 0.05, CAUTIOUS = 0.02 }
near_step = 0.01
near_fraction = 0.10

[lb]
kind = "haproxy"
socket = "/run/haproxy/admin.sock"
backend = "web"

[traffic]
rate_per_s = 2000
"""

HEALTH = """\
[metric.queue_delay]
entity = "cluster"
key = "1000 * sum(rate(sample_queue_seconds_sum[2s])) / sum(rate(sample_queue_seconds_count[2s]))"
time_window = "6s"
sample_fraction = 0.4
level_ranges.BOLD = [0, 10]
level_ranges.MODERATE = [10, 15]
level_ranges.CAUTIOUS = [15, 18]
level_ranges.NOMORE = [18, 20]
level_ranges.BACKOFF = [20, inf]

[metric.p99]
entity = "engine"
key = "p99_ms"
time_window = 4
sample_fraction = 0.5
level_ranges.BOLD = [0, 50]
level_ranges.MODERATE = [50, 80]
level_ranges.CAUTIOUS = [80, 90]
level_ranges.NOMORE = [90, 100]
level_ranges.BACKOFF = [100, inf]
"""


QUEUE_KEY = HEALTH.splitlines()[2].split('"')[1]


def write(tmp_path: Path, kraken: str = KRAKEN, health: str = HEALTH) -> Path:
    (tmp_path / "health.toml").write_text(health)
    path = tmp_path / "kraken.toml"
    path.write_text(kraken)
    return path


def test_the_documented_example_loads(tmp_path: Path) -> None:
    spec = load_kraken_file(write(tmp_path))
    assert isinstance(spec, KrakenTest)
    assert spec.test.servers == ("web1", "web2", "web3", "web4")
    assert spec.test.start_share == 0.4
    assert spec.lb.socket == "/run/haproxy/admin.sock"
    assert spec.lb.backend == "web"
    assert spec.traffic.rate_per_s == 2000
    assert spec.traffic.trace is None  # the bundled sample trace
    assert spec.health_path == tmp_path / "health.toml"
    assert [m.name for m in spec.health] == ["queue_delay", "p99"]
    assert [m.threshold for m in spec.health] == [18.0, 90.0]


def test_the_policy_comes_from_the_test_table(tmp_path: Path) -> None:
    kraken = KRAKEN.replace("steps = { BOLD = 0.15, MODERATE = 0.05, CAUTIOUS = 0.02 }",
                            "steps = { BOLD = 0.2 }")  # fmt: skip
    policy = load_kraken_file(write(tmp_path, kraken)).policy(max_share=0.9)
    # The levels a file leaves out keep the default steps.
    assert dict(policy.steps) == {Level.BOLD: 0.2, Level.MODERATE: 0.05, Level.CAUTIOUS: 0.02}
    assert (policy.near_step, policy.near_fraction) == (0.01, 0.10)
    assert (policy.hold_intervals, policy.max_backoffs, policy.max_share) == (3, 2, 0.9)


def test_a_real_fleet_names_its_frontend_and_known_server_capacity(tmp_path: Path) -> None:
    kraken = KRAKEN.replace('kind = "cluster"', 'kind = "cluster"\nper_server_capacity_per_s = 450')
    kraken = kraken.replace(
        "rate_per_s = 2000", 'rate_per_s = 2000\nurl = "http://lb.example:8080"'
    )
    spec = load_kraken_file(write(tmp_path, kraken))
    assert spec.test.per_server_capacity_per_s == 450
    assert spec.traffic.url == "http://lb.example:8080"
    message = problems_of(tmp_path, kraken.replace("http://lb.example:8080", "lb.example"))
    assert "traffic.url: value error, 'lb.example' is not an http:// address" in message


def test_relative_paths_are_taken_from_the_files_folder(tmp_path: Path) -> None:
    (tmp_path / "users.jsonl").write_text("")
    kraken = KRAKEN.replace('"/run/haproxy/admin.sock"', '"run/admin.sock"').replace(
        "rate_per_s = 2000", 'rate_per_s = 2000\ntrace = "users.jsonl"'
    )
    spec = load_kraken_file(write(tmp_path, kraken))
    assert spec.lb.socket == str(tmp_path / "run" / "admin.sock")
    assert spec.traffic.trace == str(tmp_path / "users.jsonl")


def problems_of(tmp_path: Path, kraken: str = KRAKEN, health: str = HEALTH) -> str:
    with pytest.raises(ConfigError) as caught:
        load_kraken_file(write(tmp_path, kraken, health))
    return str(caught.value)


def test_problems_of_both_files_come_in_one_round(tmp_path: Path) -> None:
    health = HEALTH.replace("sample_fraction = 0.4", "sample_fraction = 1.4")
    health = health.replace("level_ranges.CAUTIOUS = [80, 90]", "level_ranges.CAUTIOS = [80, 90]")
    health = health.replace("level_ranges.MODERATE = [10, 15]", "level_ranges.MODERATE = [10, 16]")
    message = problems_of(tmp_path, KRAKEN.replace("rate_per_s = 2000", "rate_per_s = -1"), health)
    assert message.startswith(f"{tmp_path / 'kraken.toml'}: 5 problems")
    assert "health.toml:5: metric.queue_delay.sample_fraction: 1.4 is outside [0, 1]" in message
    assert (
        "health.toml:8: metric.queue_delay.level_ranges.CAUTIOUS: [15.0, ...) overlaps" in message
    )
    assert "metric.p99.level_ranges.CAUTIOS: unknown level 'CAUTIOS'" in message
    assert "metric.p99.level_ranges: missing level CAUTIOUS" in message
    assert "kraken.toml:22: traffic.rate_per_s: input should be greater than 0" in message


def test_unknown_fields_suggest_the_known_one(tmp_path: Path) -> None:
    message = problems_of(tmp_path, KRAKEN.replace("hold_intervals", "hold_interval"))
    assert "kraken.toml:10: test.hold_interval: unknown field" in message
    assert "fix: did you mean 'hold_intervals'?" in message


def test_rules_across_fields(tmp_path: Path) -> None:
    kraken = KRAKEN.replace('"web3", "web4"', '"web3", "web3"').replace(
        "control_interval_s = 2.0", "control_interval_s = 0.2"
    )
    kraken = kraken.replace("CAUTIOUS = 0.02", "CAUTIOUS = 0.02, NOMORE = 0.01")
    health = HEALTH.replace("time_window = 4", 'time_window = "200ms"')
    health = health.replace('entity = "cluster"', 'entity = "server:web9"')
    message = problems_of(tmp_path, kraken, health)
    assert "kraken.toml:5: test.servers: web3 named twice" in message
    assert "test.control_interval_s: 0.2 s is shorter than sample_interval_s (0.5 s)" in message
    assert "test.steps.NOMORE: no step for level 'NOMORE'" in message
    assert "health.toml:2: metric.queue_delay.entity: 'web9' is not a server under test" in message
    assert "fix: use one of web1, web2, web3 ([test] servers of kraken.toml)" in message
    assert "metric.p99.time_window: 0.2 s is shorter than one sample" in message


def test_missing_files_and_tables(tmp_path: Path) -> None:
    message = problems_of(tmp_path, KRAKEN.replace('"health.toml"', '"nope.toml"'))
    assert f"{tmp_path / 'nope.toml'}: health: no such file" in message
    message = problems_of(tmp_path, KRAKEN.replace("[lb]", "[lbs]"))
    assert "lb: missing" in message
    assert "lbs: unknown field" in message
    message = problems_of(tmp_path, KRAKEN + 'trace = "missing.jsonl"\n')
    assert "traffic.trace: no such file" in message


def test_an_nginx_lb_takes_its_files_from_the_files_folder_and_no_socket(tmp_path: Path) -> None:
    nginx = 'kind = "nginx"\nconfig = "nginx.conf"\nupstream_file = "conf.d/web.conf"'
    kraken = KRAKEN.replace('kind = "haproxy"\nsocket = "/run/haproxy/admin.sock"', nginx)
    lb = load_kraken_file(write(tmp_path, kraken)).lb
    assert (lb.kind, lb.socket, lb.backend) == ("nginx", None, "web")
    assert lb.config == str(tmp_path / "nginx.conf")
    assert lb.upstream_file == str(tmp_path / "conf.d" / "web.conf")
    message = problems_of(
        tmp_path, kraken.replace('kind = "nginx"', 'kind = "nginx"\nsocket = "a"')
    )
    assert "kraken.toml:18: lb.socket: socket is haproxy's, and this load balancer is" in message
    assert (
        'fix: remove it (nginx takes config and upstream_file), or write kind = "haproxy"'
        in message
    )


def test_a_file_without_its_lbs_paths_asks_for_them_or_a_local_fleet(tmp_path: Path) -> None:
    kraken = KRAKEN.replace(
        'kind = "haproxy"\nsocket = "/run/haproxy/admin.sock"', 'kind = "nginx"'
    )
    test = load_kraken_file(write(tmp_path, kraken))
    with pytest.raises(ConfigError) as caught:
        plan_of(test)
    assert "[lb] config is missing: nginx's main configuration" in caught.value.message
    assert caught.value.hint is not None and "--local-fleet N" in caught.value.hint
    assert plan_of(test, local_fleet=True).lb == LbSpec("nginx", "web")


def test_a_query_that_gives_one_value_per_server_is_a_file_mistake(tmp_path: Path) -> None:
    """Found before the run starts, with its line and fix (it was an abort mid-run)."""
    per_server = "1000 * sum by (instance) (rate(sample_queue_seconds_sum[2s]))"
    health = HEALTH.replace(
        QUEUE_KEY,
        per_server,
    )
    health += (
        '\n[metric.served]\nentity = "cluster"\nkey = "rate(sample_requests_total[2s])"\n'
        + HEALTH.split('key = "p99_ms"\n')[1]
    )
    message = problems_of(tmp_path, health=health)
    assert message.startswith(f"{tmp_path / 'kraken.toml'}: 2 problems")
    assert (
        "health.toml:3: metric.queue_delay.key: gives one value per server (instance), not one"
        in message
    )
    assert "fix: aggregate it to one value: wrap it in sum(...), avg(...) or max(...)" in message
    assert (
        "health.toml:25: metric.served.key: gives one value per server (4 servers under test)"
        in message
    )


def test_a_query_over_one_server_may_keep_its_instance_label(tmp_path: Path) -> None:
    """One server's series are one value per series; its instance label parts nothing."""
    health = HEALTH.replace('entity = "cluster"', 'entity = "server:web1"').replace(
        QUEUE_KEY,
        "1000 * sum by (instance) (rate(sample_queue_seconds_sum[2s]))",
    )
    assert load_kraken_file(write(tmp_path, health=health)).health[0].server == "web1"


def test_a_server_the_balancer_lacks_is_a_file_mistake_with_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, KRAKEN.replace('"web4"', '"web5"'))
    with pytest.raises(ConfigError) as caught:
        check_servers(path, ("web1", "web2", "web3", "web5"),
                      ["web1", "web2", "web3", "web4", "rest"], "--local-fleet 4")  # fmt: skip
    message = str(caught.value)
    assert "kraken.toml:5: test.servers: 'web5' is not a server of --local-fleet 4" in message
    assert "fix: did you mean 'web4'? its servers are rest, web1, web2, web3, web4" in message
    check_servers(path, ("web1", "rest"), ["web1", "rest"], "haproxy")  # all there: no error


def test_an_instance_matcher_naming_a_server_not_read_is_a_file_mistake(tmp_path: Path) -> None:
    key = 'sum(rate(sample_queue_seconds_sum{instance="web5"}[2s]))'
    health = HEALTH.replace(f'"{QUEUE_KEY}"', f"'{key}'")
    message = problems_of(tmp_path, health=health)
    assert 'health.toml:3: metric.queue_delay.key: instance="web5" is not a server' in message
    assert "fix: name one of web1, web2, web3, web4 (its entity's servers)" in message
