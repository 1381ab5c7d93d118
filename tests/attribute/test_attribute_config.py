"""Attribution files: factors and how they reach the service or the load, the design, every
problem at once with its line and fix."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hairline.attribute.config import load_attribution_file
from hairline.errors import ConfigError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "sample-service"


def write(tmp_path: Path, text: str) -> Path:
    for name in ("service.toml", "trace.jsonl", "attribute-experiment.toml"):
        shutil.copy(EXAMPLES / name, tmp_path / name)
    path = tmp_path / "attribute.toml"
    path.write_text('experiment = "attribute-experiment.toml"\n' + text)
    return path


def test_the_example_reads_as_a_two_by_two_design() -> None:
    spec = load_attribution_file(EXAMPLES / "attribute.toml")
    assert spec.levels == {"cpu": ("0", "1"), "stall": ("off", "on")}
    assert len(spec.treatments) == 4
    arm = spec.arm({"cpu": "1", "stall": "on"}, run=7)
    assert arm.args[-8:] == ["--regress-cpu", "1", "--stall-every", "400", "--stall-ms", "10",
                             "--stall-seed", "7"]  # fmt: skip
    # Another run of the same treatment stalls other requests: {run} is its number.
    assert spec.arm({"cpu": "1", "stall": "on"}, run=8).args[-1] == "8"
    assert spec.arm({"cpu": "0", "stall": "off"}).args[-2:] == ["--regress-cpu", "0"]
    assert spec.experiment.load.arrival == "poisson"


def test_a_load_factor_sets_the_load_and_env_factors_set_variables(tmp_path: Path) -> None:
    spec = load_attribution_file(write(tmp_path, """
[factors.rate]
levels = [200, 400]
load = "rate_per_s"
[factors.arrival]
levels = ["constant", "poisson"]
load = "arrival"
[factors.mode]
levels = ["a", "b"]
env = { MODE = "{value}", SEED = "{run}" }
"""))  # fmt: skip
    assert spec.load_factors == ("rate", "arrival")
    load = spec.load({"rate": "400", "arrival": "constant", "mode": "b"})
    assert (load.rate_per_s, load.arrival) == (400.0, "constant")
    env = spec.arm({"rate": "200", "arrival": "poisson", "mode": "b"}, run=3).env
    assert (env["MODE"], env["SEED"]) == ("b", "3")


def test_a_single_repetition_is_refused(tmp_path: Path) -> None:
    # Intervals come from resampling runs: one run per treatment has nothing to resample.
    path = write(tmp_path, '[factors.a]\nlevels = [1, 2]\nargs = ["{value}"]\n'
                           "[design]\nrepetitions = 1\n")  # fmt: skip
    with pytest.raises(ConfigError, match=r"design.repetitions"):
        load_attribution_file(path)


def test_every_problem_is_reported_with_its_line_and_fix(tmp_path: Path) -> None:
    path = write(tmp_path, """
[factors.one]
levels = ["x"]
args = ["--x"]
[factors.nowhere]
levels = [1, 2]
[factors.bad]
levels = [1, 2]
args = ["--b", "{other}"]
[factors.rate]
levels = [-1, 2]
load = "rate_per_s"
[design]
generators = ["c = a*b"]
[analysis]
quantiles = [0.5, 1.5]
""")  # fmt: skip
    with pytest.raises(ConfigError) as caught:
        load_attribution_file(path)
    text = str(caught.value)
    for expected in (
        "factors.one.levels", "two or more levels",
        "factors.nowhere", "reaches neither",
        "{other} is not a placeholder",
        "'-1' is not a valid rate_per_s",
        "generators belong to a fractional design",
        "outside (0, 1)",
    ):  # fmt: skip
        assert expected in text, text
    assert "attribute.toml:4: factors.one.levels" in text  # file:line: field


def test_a_fraction_that_aliases_the_model_terms_is_refused(tmp_path: Path) -> None:
    factors = """
[factors.a]
levels = ["0", "1"]
args = ["--a", "{value}"]
[factors.b]
levels = ["0", "1"]
args = ["--b", "{value}"]
[factors.c]
levels = ["0", "1"]
args = ["--c", "{value}"]
[design]
type = "fractional"
generators = ["c = a*b"]
"""
    with pytest.raises(ConfigError, match="cannot tell apart a with b:c"):
        load_attribution_file(write(tmp_path, factors))
    spec = load_attribution_file(write(tmp_path, factors + "[analysis]\ninteractions = 1\n"))
    assert len(spec.treatments) == 4


def test_an_unknown_field_gets_a_did_you_mean(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="did you mean 'levels'"):
        load_attribution_file(write(tmp_path, '[factors.a]\nlevel = [1, 2]\nargs = ["{value}"]\n'))


def test_a_template_is_rendered_per_treatment_and_its_path_passed(tmp_path: Path) -> None:
    (tmp_path / "svc.conf.j2").write_text("workers = {{ workers }}\nmode = {{ mode }}\n")
    path = write(tmp_path, """
[template]
file = "svc.conf.j2"
name = "svc.conf"
args = ["--config", "{config_file}"]
[factors.workers]
levels = [1, 4]
[factors.mode]
levels = ["a", "b"]
env = { MODE = "{value}" }
""")  # fmt: skip
    spec = load_attribution_file(path)
    arm = spec.arm({"workers": "4", "mode": "b"}, tmp_path / "t4")
    assert arm.args[-2:] == ["--config", str(tmp_path / "t4" / "svc.conf")]
    assert (tmp_path / "t4" / "svc.conf").read_text() == "workers = 4\nmode = b\n"
    assert not (tmp_path / "t4" / "svc.conf.partial").exists()


def test_a_template_that_names_no_factor_or_passes_no_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "svc.conf.j2").write_text("workers = {{ wrokers }}\n")
    path = write(tmp_path, """
[template]
file = "svc.conf.j2"
args = ["--config"]
[factors.workers]
levels = [1, 4]
""")  # fmt: skip
    with pytest.raises(ConfigError) as caught:
        load_attribution_file(path)
    text = str(caught.value)
    assert "uses wrokers, not factors" in text
    assert "no word passes the rendered file" in text
    assert "factors.workers: the factor reaches neither" in text
