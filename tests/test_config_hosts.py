"""Experiment files: priority, [hosts] max_cov, and hardware mode's host classes per arm."""

from __future__ import annotations

from pathlib import Path

import pytest

from hairline.config import load_experiment
from hairline.errors import ConfigError

SERVICE = '[service]\nname = "svc"\nstart = "sleep 1 {port}"\n'


def experiment(tmp_path: Path, body: str) -> Path:
    (tmp_path / "service.toml").write_text(SERVICE)
    (tmp_path / "trace.jsonl").write_text('{"hairline_trace": 1}\n{"path": "/"}\n')
    path = tmp_path / "experiment.toml"
    path.write_text(f'service = "service.toml"\ntrace = "trace.jsonl"\n{body}\n')
    return path


HARDWARE = """\
priority = 3
[arms.xeon]
hosts = { cpu_model = "Intel Xeon Platinum 8375C" }
[arms.epyc]
hosts = { cpu_model = "AMD EPYC 7R13" }
[load]
duration_s = 2
[design]
mode = "hardware"
[hosts]
max_cov = 0.1
"""


def test_a_hardware_experiment_reads_with_its_host_classes_priority_and_max_cov(
    tmp_path: Path,
) -> None:
    config = load_experiment(experiment(tmp_path, HARDWARE))
    assert config.design.mode == "hardware" and config.priority == 3
    # Each arm stays on its host: the schedule run and reported is "pinned".
    assert config.design.schedule == "pinned"
    assert config.hosts.cov_limit == 0.1
    classes = {name: arm.hosts.facts() for name, arm in config.arms.items() if arm.hosts}
    assert classes == {"xeon": {"cpu_model": "Intel Xeon Platinum 8375C"},
                       "epyc": {"cpu_model": "AMD EPYC 7R13"}}  # fmt: skip
    # Its A/A runs the baseline's hardware on both arms.
    assert {a.hosts.facts()["cpu_model"] for a in config.as_aa().arms.values() if a.hosts} == {
        "Intel Xeon Platinum 8375C"
    }


def test_defaults_are_efficiency_mode_priority_zero_and_max_cov_five_percent(
    tmp_path: Path,
) -> None:
    config = load_experiment(experiment(tmp_path, "[arms.A]\n[arms.B]\n[load]\nduration_s = 2"))
    assert config.design.mode == "efficiency" and config.priority == 0
    assert config.design.schedule == "fully-balanced"
    assert config.hosts.cov_limit == 0.05
    off = load_experiment(
        experiment(tmp_path, '[arms.A]\n[arms.B]\n[load]\nduration_s = 2\n[hosts]\nmax_cov = "off"')
    )
    assert off.hosts.cov_limit is None


@pytest.mark.parametrize(
    ("body", "words"),
    [
        # A host class outside hardware mode.
        ('[arms.A]\nhosts = { kernel = "6.1" }\n[arms.B]\n[load]\nduration_s = 2',
         ["arms.A.hosts", "only for hardware mode", 'mode = "hardware"']),
        # Hardware mode with an arm that says nothing of its machines.
        ('[arms.A]\nhosts = { kernel = "6.1" }\n[arms.B]\n[load]\nduration_s = 2\n'
         '[design]\nmode = "hardware"',
         ["arms.B.hosts", "needs each arm's host class", "cpu_model"]),
        # Arms naming different facts, or the same class.
        ('[arms.A]\nhosts = { kernel = "6.1" }\n[arms.B]\nhosts = { cpu_model = "X" }\n'
         '[load]\nduration_s = 2\n[design]\nmode = "hardware"',
         ["arms.B.hosts", "names cpu_model; arms.A.hosts names kernel"]),
        ('[arms.A]\nhosts = { kernel = "6.1" }\n[arms.B]\nhosts = { kernel = "6.1" }\n'
         '[load]\nduration_s = 2\n[design]\nmode = "hardware"',
         ["arms.B.hosts", "the same host class as arms.A"]),
        # One build: an arm with its own arguments is not hardware mode.
        ('[arms.A]\nhosts = { kernel = "6.1" }\n[arms.B]\nhosts = { kernel = "6.8" }\n'
         'args = ["--fast"]\n[load]\nduration_s = 2\n[design]\nmode = "hardware"',
         ["arms.B.args", "one build on every arm"]),
        # Misspelt facts, a bad turbo, a bad max_cov, a priority out of range.
        ('[arms.A]\nhosts = { cpu = "X" }\n[arms.B]\n[load]\nduration_s = 2',
         ["arms.A.hosts.cpu", "unknown field", "cpu_model"]),
        ('[arms.A]\nhosts = { turbo = "maybe" }\n[arms.B]\n[load]\nduration_s = 2',
         ["arms.A.hosts.turbo", "'on' or 'off'"]),
        ('[arms.A]\n[arms.B]\n[load]\nduration_s = 2\n[hosts]\nmax_cov = 0',
         ["hosts.max_cov", 'or "off"']),
        ('priority = 5000\n[arms.A]\n[arms.B]\n[load]\nduration_s = 2', ["priority", "1000"]),
    ],
)  # fmt: skip
def test_bad_host_fields_are_named_with_their_line_and_fix(
    tmp_path: Path, body: str, words: list[str]
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_experiment(experiment(tmp_path, body))
    text = str(caught.value)
    assert "experiment.toml:" in text
    for word in words:
        assert word in text, text


PINNED = '[arms.control]\n[arms.test]\nargs = ["--x"]\n[load]\nduration_s = 2\n[hosts]\n'


def test_pinned_arms_stay_on_their_hosts_without_naming_the_design(tmp_path: Path) -> None:
    config = load_experiment(
        experiment(tmp_path, PINNED + 'pin = { control = ["w2", "w4"], test = ["w3"] }')
    )
    assert config.hosts.pin == {"control": ["w2", "w4"], "test": ["w3"]}
    assert config.design.name == "pinned" and config.design.schedule == "pinned"
    # Its A/A keeps the pins: the baseline on each arm's own hosts.
    assert config.as_aa().hosts.pin == config.hosts.pin


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ('pin = { control = ["w2"], tset = ["w3"] }',
         ["hosts.pin.tset", "no arm 'tset'", "control, test", "arms test have no hosts"]),
        ('pin = { control = ["w2"], test = [] }', ["hosts.pin.test", "names no host"]),
        ('pin = { control = ["w2"], test = ["w2"] }',
         ["hosts.pin.test", "'w2' is pinned to arms control and test", "disjoint"]),
        ('pin = { control = ["w2"], test = ["w3"] }\n[design]\nname = "fully-balanced"',
         ["design.name", "swaps arms between hosts", "pin implies"]),
        ('max_cov = 0.1\n[design]\nname = "pinned"', ["design.name", "needs [hosts] pin"]),
    ],
)  # fmt: skip
def test_bad_pins_are_named_with_their_fix(tmp_path: Path, body: str, words: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        load_experiment(experiment(tmp_path, PINNED + body))
    text = str(caught.value)
    for word in words:
        assert word in text, text
