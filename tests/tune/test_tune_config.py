"""Tuning files: read once, every problem named by file, line and field with its fix."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hairline.errors import ConfigError
from hairline.tune.apply import arm_for, batch_experiments
from hairline.tune.config import load_tuning_file
from hairline.tune.space import BoolParam, ChoiceParam, IntParam

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample-service"

GOOD = """
experiment = "experiment.toml"

[objective]
metric = "cpu_ns_per_request"

[search]
searcher = "bo"
evaluations = 6

[apply]
args = ["--log-batch", "{batch}"]
flags = { compress = "--log-compress" }
env = { MODE = "{mode}" }

[params.batch]
type = "int"
low = 1
high = 4096
log = true
default = 64

[params.compress]
type = "bool"
default = false

[params.mode]
type = "choice"
choices = ["fast", "safe"]
default = "safe"
"""


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    for name in ("service.toml", "experiment.toml", "trace.jsonl"):
        shutil.copy(SAMPLE / name, tmp_path / name)
    return tmp_path


def write(folder: Path, text: str) -> Path:
    path = folder / "tune.toml"
    path.write_text(text)
    return path


def problems(folder: Path, text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_tuning_file(write(folder, text))
    return caught.value.message


def test_a_good_file_becomes_a_typed_spec(folder: Path) -> None:
    spec = load_tuning_file(write(folder, GOOD))
    assert spec.space.params == (
        IntParam("batch", 1, 4096, log=True),
        BoolParam("compress"),
        ChoiceParam("mode", ("fast", "safe")),
    )
    assert spec.default == {"batch": 64, "compress": False, "mode": "safe"}
    assert spec.higher_is_better is False  # CPU per request: lower is better
    assert (spec.searcher, spec.evaluations, spec.batch_size) == ("bo", 6, 1)


def test_a_configuration_reaches_the_arm_as_words_flags_and_env(folder: Path) -> None:
    spec = load_tuning_file(write(folder, GOOD))
    arm = arm_for(spec, {"batch": 256, "compress": True, "mode": "fast"}, folder / "c1")
    assert arm.args[-3:] == ["--log-batch", "256", "--log-compress"]
    assert arm.env["MODE"] == "fast"
    off = arm_for(spec, spec.default, folder / "default")
    assert "--log-compress" not in off.args


def test_a_batch_is_one_ab_per_candidate_or_one_with_a_shared_control(folder: Path) -> None:
    spec = load_tuning_file(write(folder, GOOD))
    candidates = [(0, {**spec.default, "batch": 8}), (1, {**spec.default, "batch": 512})]
    apart = batch_experiments(spec, candidates, folder / "run")
    assert [(list(c.arms), held) for c, held in apart] == [
        (["default", "c1"], (0,)),
        (["default", "c2"], (1,)),
    ]
    assert all(c.design.decide_on == ["cpu_ns_per_request"] for c, _ in apart)
    shared = load_tuning_file(
        write(folder, GOOD.replace("evaluations = 6", "evaluations = 6\nshared_control = true"))
    )
    [(config, held)] = batch_experiments(shared, candidates, folder / "run")
    assert list(config.arms) == ["default", "c1", "c2"] and held == (0, 1)
    assert config.comparisons == {"c1": "default", "c2": "default"}


def test_a_template_is_rendered_per_candidate_and_its_path_passed(folder: Path) -> None:
    (folder / "app.conf.j2").write_text("workers {{ batch }}\ncompress {{ compress }}\n")
    text = GOOD.replace(
        'env = { MODE = "{mode}" }', 'env = { MODE = "{mode}", CONF = "{config_file}" }'
    )
    text = text.replace(
        "[params.batch]",
        '[apply.file]\ntemplate = "app.conf.j2"\nname = "app.conf"\n\n[params.batch]',
    )
    spec = load_tuning_file(write(folder, text))
    arm = arm_for(spec, {"batch": 32, "compress": True, "mode": "fast"}, folder / "c1")
    rendered = Path(arm.env["CONF"])
    assert rendered == folder / "c1" / "app.conf"
    assert rendered.read_text() == "workers 32\ncompress True\n"


def test_a_bad_range_and_an_unknown_parameter_are_named_with_their_lines(folder: Path) -> None:
    text = GOOD.replace("low = 1\nhigh = 4096", "low = 4096\nhigh = 1").replace(
        '"{batch}"]', '"{batch}", "--x", "{bacth}"]'
    )
    message = problems(folder, text)
    assert "tune.toml:19: params.batch.high: the range 4096..1 is empty or backwards" in message
    assert "apply.args: {bacth} is not a parameter" in message
    assert "use one of {batch}, {compress}, {mode}" in message


def test_fields_of_the_wrong_shape_are_reported_together(folder: Path) -> None:
    text = GOOD.replace('choices = ["fast", "safe"]', 'choices = ["fast", "safe"]\nstep = 2')
    text = text.replace('type = "bool"', 'type = "boolean"')
    message = problems(folder, text)
    assert "2 problems" in message
    assert "params.mode.step: unknown field" in message
    assert "params.compress.type: 'boolean' is not allowed" in message


def test_semantic_problems_are_reported_together(folder: Path) -> None:
    text = (
        GOOD.replace('metric = "cpu_ns_per_request"', 'metric = "cpu_per_req"')
        .replace('searcher = "bo"', 'searcher = "annealing"')
        .replace("default = 64", "default = 10000")
    )
    message = problems(folder, text)
    assert "3 problems" in message
    assert "objective.metric: 'cpu_per_req' is not a metric" in message
    assert "search.searcher: 'annealing' is not a searcher" in message
    assert "params.batch.default: 10000 is outside the range 1..4096" in message


def test_a_parameter_that_reaches_nothing_is_an_error(folder: Path) -> None:
    message = problems(folder, GOOD.replace('env = { MODE = "{mode}" }', ""))
    assert "params.mode: the parameter reaches the service nowhere" in message


def test_unknown_searcher_options_and_log_ranges_from_zero(folder: Path) -> None:
    text = GOOD.replace("evaluations = 6", "evaluations = 6\noptions = { initial = 2, warp = 1 }")
    text = text.replace("low = 1\n", "low = 0\n")
    message = problems(folder, text)
    assert "search.options: unknown option 'warp' for searcher 'bo'" in message
    assert "params.batch.low: a log-scaled range must start above 0" in message


def test_a_grid_budget_defaults_to_the_whole_space(folder: Path) -> None:
    text = GOOD.replace('searcher = "bo"\nevaluations = 6', 'searcher = "grid"')
    text = text.replace("high = 4096", "high = 4").replace("default = 64", "default = 2")
    spec = load_tuning_file(write(folder, text))
    assert spec.evaluations == 4 * 2 * 2 - 1


def test_an_int_parameter_may_list_the_values_worth_trying(folder: Path) -> None:
    text = GOOD.replace("low = 1\nhigh = 4096", "values = [16, 64, 256, 1024]")
    spec = load_tuning_file(write(folder, text))
    [batch] = [p for p in spec.space.params if p.name == "batch"]
    assert batch == IntParam("batch", 16, 1024, log=True, levels=(16, 64, 256, 1024))
    # The searchers' unit cube maps back onto the listed values only.
    assert {
        spec.space.decode(spec.space.encode({**spec.default, "batch": v}) * 0.97)["batch"]
        for v in (16, 64, 256, 1024)
    } <= {16, 64, 256, 1024}
    unlisted = GOOD.replace("low = 1\nhigh = 4096", "values = [16, 64]").replace(
        "default = 64", "default = 32"
    )
    assert "params.batch.default: 32 is not one of the values" in problems(folder, unlisted)
