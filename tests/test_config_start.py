"""An arm's start command: placeholders filled, `{hairline}` as this interpreter's hairline."""

from __future__ import annotations

import sys
from pathlib import Path

from hairline.config import load_experiment
from hairline.config.experiment import ArmConfig, ServiceConfig, start_command

ROUTING = Path(__file__).resolve().parents[1] / "examples" / "routing"


def test_hairline_is_this_interpreter_running_the_package() -> None:
    service = ServiceConfig(name="fleet", start="{hairline} route fleet --port {port}")
    words = start_command(service, ArmConfig(args=["--x"]), {"port": "8080"})
    assert words == [sys.executable, "-m", "hairline", "route", "fleet", "--port", "8080", "--x"]


def test_doubled_braces_pass_a_placeholder_on_to_the_command_it_starts() -> None:
    service = ServiceConfig(name="fleet", start="{hairline} route fleet --policy {arm} -- "
                            "{engine} sample-service --port {{port}}")  # fmt: skip
    words = start_command(service, ArmConfig(), {"port": "1", "arm": "semantic", "engine": "e"})
    assert words[3:] == ["route", "fleet", "--policy", "semantic", "--", "e", "sample-service",
                         "--port", "{port}"]  # fmt: skip


def test_the_routing_example_is_valid() -> None:
    config = load_experiment(ROUTING / "experiment.toml")
    assert list(config.arms) == ["round-robin", "semantic"]
    assert config.baseline_arm == "round-robin"
