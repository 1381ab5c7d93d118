"""Experiment files: the [mode] table, capacity mode's settings and their errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from hairline.config import builtin_direction, load_experiment
from hairline.errors import ConfigError

SERVICE = '[service]\nname = "svc"\nstart = "sleep 1 {port}"\n'
ARMS = "[arms.A]\n[arms.B]\n[load]\nduration_s = 10\n"


def experiment(tmp_path: Path, body: str) -> Path:
    (tmp_path / "service.toml").write_text(SERVICE)
    (tmp_path / "trace.jsonl").write_text('{"hairline_trace": 1}\n{"path": "/"}\n')
    path = tmp_path / "experiment.toml"
    path.write_text(f'service = "service.toml"\ntrace = "trace.jsonl"\n{body}\n')
    return path


def test_capacity_mode_reads_with_its_defaults_and_decides_on_max_throughput(
    tmp_path: Path,
) -> None:
    body = ARMS + '[mode]\nname = "capacity"\nslo_p99_ms = 20\n'
    config = load_experiment(experiment(tmp_path, body))

    assert config.mode_name == "capacity"
    assert config.mode.slo_p99_ms == 20 and config.mode.probe_s == 1.0
    assert config.mode.tolerance == 0.02 and config.mode.max_error_rate == 0.01
    assert config.design.decide_on == ["max_throughput_per_s"]
    assert config.design.schedule == "fully-balanced"
    assert builtin_direction("max_throughput_per_s") == "lower-is-worse"
    assert config.policies()["max_throughput_per_s"].direction == "lower-is-worse"


def test_the_mode_table_and_the_old_design_mode_both_make_hardware_mode(tmp_path: Path) -> None:
    arms = (
        '[arms.A]\nhosts = { kernel = "6.1" }\n[arms.B]\nhosts = { kernel = "6.8" }\n'
        "[load]\nduration_s = 2\n"
    )
    new = load_experiment(experiment(tmp_path, arms + '[mode]\nname = "hardware"'))
    old = load_experiment(experiment(tmp_path, arms + '[design]\nmode = "hardware"'))

    for config in (new, old):
        assert config.mode_name == "hardware"
        assert config.design.schedule == "pinned"


def test_without_a_mode_table_the_experiment_measures_efficiency(tmp_path: Path) -> None:
    config = load_experiment(experiment(tmp_path, ARMS))

    assert config.mode_name == "efficiency"
    assert config.design.decide_on == ["cpu_ns_per_request"]


PID = '[mode]\nname = "capacity"\nslo_p99_ms = 20\nsearch = "pid"\n'


@pytest.mark.parametrize(
    ("body", "words"),
    [
        # The SLO is what capacity is measured against.
        ('[mode]\nname = "capacity"',
         ["mode.slo_p99_ms", "needs the SLO", "slo_p99_ms = 50"]),
        ('[mode]\nname = "throughput"\nslo_p99_ms = 20',
         ["mode.name", "capacity"]),
        ('[mode]\nname = "capacity"\nslo_p99_ms = -1', ["mode.slo_p99_ms", "greater than 0"]),
        ('[mode]\nname = "capacity"\nslo_p99_ms = 20\nmax_cpu_utilization = 1.5',
         ["mode.max_cpu_utilization", "less than or equal to 1"]),
        ('[mode]\nname = "capacity"\nslo_p99_ms = 20\ntolerance = 0',
         ["mode.tolerance", "greater than 0"]),
        ('[mode]\nname = "capacity"\nslo_p99_ms = 20\nslo_p99 = 3',
         ["mode.slo_p99", "unknown field"]),
        # Capacity's settings outside capacity mode.
        ("[mode]\nslo_p99_ms = 20", ["mode.slo_p99_ms", "a setting of capacity mode",
                                      'name = "capacity"']),
        # The two tables disagreeing.
        ('[mode]\nname = "capacity"\nslo_p99_ms = 20\n[design]\nmode = "hardware"',
         ["design.mode", "contradicts", "drop [design] mode"]),
        ('[mode]\nname = "capacity"\nslo_p99_ms = 20\nstart_rate_per_s = 900\n'
         "max_rate_per_s = 500", ["mode.start_rate_per_s", "above max_rate_per_s"]),
        ('[mode]\nname = "capacity"\nslo_p99_ms = 20\nprobe_s = 30',
         ["mode.probe_s", "longer than [load] duration_s"]),
        ('[mode]\nname = "capacity"\nslo_p99_ms = 20\n[design]\ndecide_on = ["cpu_ns_per_request"]',
         ["design.decide_on", "not measured in capacity mode", "max_throughput_per_s"]),
        # The PID search's target.
        (PID.replace('"pid"', '"pi"'), ["mode.search", "'probe' or 'pid'"]),
        (PID + 'target = "mean"', ["mode.target_latency_ms", 'target = "mean" needs',
                                   "target_latency_ms = 5"]),
        (PID + "target_latency_ms = 4", ["mode.target_latency_ms", "the target is slo_p99_ms",
                                         'target = "mean"']),
        (PID + 'target = "mean"\ntarget_latency_ms = 25',
         ["mode.target_latency_ms", "not below slo_p99_ms"]),
        (PID + "probe_s = 0.5", ["mode.probe_s", "runs no probes"]),
        ('[mode]\nname = "capacity"\nslo_p99_ms = 20\ntarget = "mean"',
         ["mode.target", "a setting of the PID search", 'search = "pid"']),
        ('[mode]\nsearch = "pid"', ["mode.search", "a setting of capacity mode"]),
    ],
)  # fmt: skip
def test_bad_mode_fields_are_named_with_their_line_and_fix(
    tmp_path: Path, body: str, words: list[str]
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_experiment(experiment(tmp_path, ARMS + body))
    text = str(caught.value)
    assert "experiment.toml:" in text
    for word in words:
        assert word in text, text


def test_the_pid_search_reads_with_a_p99_or_a_mean_target(tmp_path: Path) -> None:
    p99 = load_experiment(experiment(tmp_path, ARMS + PID)).mode
    mean = load_experiment(
        experiment(tmp_path, ARMS + PID + 'target = "mean"\ntarget_latency_ms = 4\n')
    ).mode

    assert (p99.search, p99.target, p99.target_latency_ms) == ("pid", "p99", None)
    assert (mean.target, mean.target_latency_ms) == ("mean", 4)
    assert (
        load_experiment(
            experiment(tmp_path, ARMS + PID.replace('search = "pid"\n', ""))
        ).mode.search
        == "probe"
    )
