"""Experiment files: the new [load] and [design] fields, and built-in metric directions."""

from __future__ import annotations

from pathlib import Path

import pytest

from hairline.config import builtin_direction, load_experiment
from hairline.errors import ConfigError

SERVICE = """\
[service]
name = "svc"
start = "sleep 1 {port}"

[service.metrics]
goodput_per_s = { threshold = "2%" }
"""


def experiment(tmp_path: Path, load: str, design: str) -> Path:
    (tmp_path / "service.toml").write_text(SERVICE)
    (tmp_path / "trace.jsonl").write_text('{"hairline_trace": 1}\n{"path": "/"}\n')
    path = tmp_path / "experiment.toml"
    path.write_text(
        'service = "service.toml"\ntrace = "trace.jsonl"\n[arms.A]\n[arms.B]\n'
        f"[load]\n{load}\n[design]\n{design}\n"
    )
    return path


def test_without_a_rate_or_a_utilization_the_load_is_calibrated_for_precision(
    tmp_path: Path,
) -> None:
    config = load_experiment(experiment(tmp_path, "duration_s = 2", 'trials = "auto"'))
    assert config.load.rate_per_s is None
    assert config.load.target_utilization is None
    assert config.design.sequential and config.design.planned_trials == 15
    assert config.design.decide_on == ["cpu_ns_per_request"]
    assert config.design.max_batch_attempts == 3


def test_a_fixed_number_of_trials_is_planned_as_it_is(tmp_path: Path) -> None:
    config = load_experiment(experiment(tmp_path, "rate_per_s = 10\nduration_s = 2", "trials = 5"))
    assert not config.design.sequential and config.design.planned_trials == 5


@pytest.mark.parametrize(
    ("design", "words"),
    [
        ('trials = "many"', ["design.trials", "auto"]),
        ("trials = 0", ["design.trials", "1 to 1000"]),
        ("max_trials = 2", ["design.max_trials", "3"]),
        ("max_batch_attempts = 0", ["design.max_batch_attempts"]),
    ],
)
def test_bad_design_fields_are_named_with_their_line(
    tmp_path: Path, design: str, words: list[str]
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_experiment(experiment(tmp_path, "duration_s = 2", design))
    text = str(caught.value)
    assert "experiment.toml:" in text
    for word in words:
        assert word in text, text


def test_a_utilization_outside_zero_to_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"load\.target_utilization"):
        load_experiment(experiment(tmp_path, "duration_s = 2\ntarget_utilization = 1.5", ""))


def test_the_score_section_is_read_and_its_problems_named_with_their_line(
    tmp_path: Path,
) -> None:
    score = (
        "trials = 5\n[analysis.score]\npass_score = 90\nmarginal_score = 60\n"
        '[analysis.score.groups.cpu]\nweight = 3\nmetrics = ["cpu_ns_per_request"]\n'
        "critical = true\n"
    )
    config = load_experiment(experiment(tmp_path, "duration_s = 2", score))
    assert (config.analysis.score.pass_score, config.analysis.score.marginal_score) == (90, 60)
    assert config.analysis.score.groups["cpu"].weight == 3
    assert config.analysis.score.groups["cpu"].critical
    bad = score.replace("weight = 3", "weight = -1").replace("= 60", "= 95")
    with pytest.raises(ConfigError) as caught:
        load_experiment(experiment(tmp_path, "duration_s = 2", bad))
    text = str(caught.value)
    assert "analysis.score.groups.cpu.weight" in text and "greater than 0" in text, text


def test_built_in_metrics_carry_their_direction(tmp_path: Path) -> None:
    assert builtin_direction("goodput_per_s") == "lower-is-worse"
    assert builtin_direction("cpu_ns_per_request") == "higher-is-worse"
    assert builtin_direction("db_reads_total[search]_per_request") == "higher-is-worse"
    config = load_experiment(experiment(tmp_path, "duration_s = 2", ""))
    policies = config.policies()
    # Named in the service file without a direction: it keeps its own.
    assert policies["goodput_per_s"].direction == "lower-is-worse"
    assert policies["goodput_per_s"].threshold.value == 0.02


def test_one_round_names_type_errors_checks_misspelt_metrics_models_and_the_trace(
    tmp_path: Path,
) -> None:
    from hairline.lab.files import load_experiment_file

    path = experiment(tmp_path, "duration_s = 2", 'trials = "many"')
    (tmp_path / "service.toml").write_text(SERVICE + 'cpu_ns_per_reqest = { threshold = "1%" }\n')
    (tmp_path / "trace.jsonl").write_text("GET /index.html HTTP/1.1\nnot json either\n")
    text = path.read_text() + '[analysis]\nmodel = "welch-nope"\n'
    path.write_text(text.replace("[arms.B]", '[arms.B]\npath = "missing-folder"'))
    with pytest.raises(ConfigError) as caught:
        load_experiment_file(path)
    message = str(caught.value)
    assert "5 problems" in message, message
    assert "design.trials" in message
    assert "service.metrics.cpu_ns_per_reqest: no metric" in message
    assert "did you mean 'cpu_ns_per_request'?" in message
    assert "arms.B.path: 'missing-folder': no such folder" in message
    assert "analysis.model: unknown model 'welch-nope'" in message
    assert "trace: 'trace.jsonl' does not start as a trace" in message


THREE_ARMS = """\
[arms.production]
[arms.parent]
baseline = "production"
[arms.change]
baseline = "parent"
"""


def three_sided(tmp_path: Path, arms: str = THREE_ARMS) -> Path:
    path = experiment(tmp_path, "duration_s = 2", "")
    path.write_text(path.read_text().replace("[arms.A]\n[arms.B]\n", arms))
    return path


def test_a_three_sided_experiment_compares_each_arm_with_the_one_it_names(
    tmp_path: Path,
) -> None:
    config = load_experiment(three_sided(tmp_path))
    assert config.baseline_arm == "production"
    assert config.comparisons == {"parent": "production", "change": "parent"}
    # Its A/A runs production's build on every arm, and compares the same pairs.
    aa = config.as_aa()
    assert aa.comparisons == config.comparisons
    assert {arm.args == config.arms["production"].args for arm in aa.arms.values()} == {True}


def test_without_arm_baselines_every_arm_is_compared_with_the_experiment_baseline(
    tmp_path: Path,
) -> None:
    config = load_experiment(three_sided(tmp_path, "[arms.A]\n[arms.B]\n[arms.C]\n"))
    assert config.comparisons == {"B": "A", "C": "A"}


@pytest.mark.parametrize(
    ("arms", "words"),
    [
        (
            '[arms.production]\n[arms.parent]\n[arms.change]\nbaseline = "parnet"\n',
            ["arms.change.baseline: 'parnet' is not an arm", "use one of production, parent"],
        ),
        (
            '[arms.production]\n[arms.change]\nbaseline = "change"\n',
            ["arms.change.baseline: an arm cannot be its own baseline"],
        ),
        (
            '[arms.production]\nbaseline = "change"\n[arms.change]\n',
            [
                "arms.production.baseline: 'production' is the experiment's baseline",
                "baseline = 'change' at the top",
            ],
        ),
        (
            '[arms.production]\n[arms.a]\nbaseline = "b"\n[arms.b]\nbaseline = "a"\n',
            [
                "arms.a.baseline: the baselines go round in a circle (a -> b -> a)",
                "compare one of these arms with 'production'",
            ],
        ),
    ],
)
def test_bad_arm_baselines_are_named_with_their_line_and_fix(
    tmp_path: Path, arms: str, words: list[str]
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_experiment(three_sided(tmp_path, arms))
    text = str(caught.value)
    assert "experiment.toml:" in text
    for word in words:
        assert word in text, text


def test_the_three_sided_example_is_valid() -> None:
    from hairline.lab.files import load_experiment_file

    example = Path(__file__).parents[1] / "examples" / "sample-service" / "three-sided.toml"
    config = load_experiment_file(example)
    assert config.comparisons == {"parent": "production", "change": "parent"}


def test_a_collector_the_registry_does_not_know_is_named_with_the_ones_it_does(
    tmp_path: Path,
) -> None:
    from hairline.lab.files import load_experiment_file

    path = experiment(tmp_path, "duration_s = 2", "")
    (tmp_path / "service.toml").write_text(
        SERVICE.replace("[service.metrics]", 'collect = ["page_faults"]\n[service.metrics]')
    )
    with pytest.raises(ConfigError) as caught:
        load_experiment_file(path)
    message = str(caught.value)
    assert "service.collect: no optional collector 'page_faults'" in message, message
    assert "use one of:" in message
