"""A configuration applied to the service: the arm of an A/B that runs it (start-command
words, flags, environment, a configuration file rendered from the tuning file's template),
and the A/B experiments of a batch of candidates against the default configuration.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import jinja2

from hairline.config import ArmConfig, ExperimentConfig
from hairline.kit.atomic import write_text_atomic
from hairline.tune.config import CONFIG_FILE_PLACEHOLDER, TuningSpec
from hairline.tune.space import Configuration, Value

__all__ = ["CONTROL_ARM", "arm_for", "batch_experiments", "candidate_arm_name", "value_text"]

# The arm running the default configuration in every tuning experiment.
CONTROL_ARM = "default"
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def value_text(value: Value) -> str:
    """A value as the service reads it: true/false, whole numbers without a point, floats
    to six significant digits."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def candidate_arm_name(position: int) -> str:
    """The arm of the run's evaluation at ``position`` (0-based): c1, c2, ..."""
    return f"c{position + 1}"


def _fill(word: str, values: dict[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), word)


def render_file(spec: TuningSpec, config: Configuration, folder: Path) -> Path | None:
    """The configuration file of ``config`` written into ``folder`` (None without a
    template). Written under a temporary name and renamed: never half a file."""
    if spec.template is None or spec.apply.file is None:
        return None
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    text = env.from_string(spec.template).render(**config)
    return write_text_atomic(folder / spec.apply.file.name, text)


def arm_for(spec: TuningSpec, config: Configuration, folder: Path) -> ArmConfig:
    """The experiment's baseline arm running ``config``: its own args and env, then the
    configuration's words, flags and variables (which win over the arm's own)."""
    base = spec.experiment.arms[spec.experiment.baseline_arm]
    values = {name: value_text(value) for name, value in config.items()}
    rendered = render_file(spec, config, folder)
    if rendered is not None:
        values[CONFIG_FILE_PLACEHOLDER] = str(rendered)
    args = [*base.args, *(_fill(word, values) for word in spec.apply.args)]
    args += [flag for name, flag in spec.apply.flags.items() if config.get(name) is True]
    env = {**base.env, **{k: _fill(v, values) for k, v in spec.apply.env.items()}}
    return base.model_copy(update={"args": args, "env": env, "baseline": None})


def batch_experiments(
    spec: TuningSpec, candidates: Sequence[tuple[int, Configuration]], folder: Path
) -> list[tuple[ExperimentConfig, tuple[int, ...]]]:
    """The A/B experiments of a batch: each candidate ``(position, config)`` against the
    default configuration, one experiment each, or with ``shared_control`` one experiment
    whose control arm every candidate is compared with. Each with the positions it holds."""
    control = arm_for(spec, spec.default, folder / "default")
    design = spec.experiment.design.model_copy(update={"decide_on": [spec.metric]})

    def experiment(members: Sequence[tuple[int, Configuration]]) -> ExperimentConfig:
        arms = {CONTROL_ARM: control}
        for position, config in members:
            arms[candidate_arm_name(position)] = arm_for(
                spec, config, folder / candidate_arm_name(position)
            )
        return spec.experiment.model_copy(
            update={"arms": arms, "baseline": CONTROL_ARM, "design": design}
        )

    if spec.shared_control:
        return [(experiment(candidates), tuple(p for p, _ in candidates))]
    return [(experiment([c]), (c[0],)) for c in candidates]
