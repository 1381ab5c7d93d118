"""``hairline demo``: catch a small CPU regression in the bundled sample service.

The demo is ``examples/sample-service/experiment.toml`` run through the lab like any
experiment: arm A is the sample service as it is; arm B is the same binary with
``--regress-cpu`` (every request does that fraction more work). Each arm gets its own CPU
set of this machine; the fully balanced design swaps them between the two batches of every
trial, and the engine replays the bundled trace to both in lockstep.
"""

from __future__ import annotations

from pathlib import Path

from hairline.config import ExperimentConfig
from hairline.errors import HairlineError
from hairline.lab.files import load_experiment_file

__all__ = ["DEMO_FILES", "demo_config", "demo_experiment_file"]

# The demo's experiment, service and trace files, inside the package so that an installed
# wheel has them (it has no examples/ folder). In a checkout they are symlinks to
# examples/sample-service/, the one copy; building the wheel packs their contents.
DEMO_FILES = Path(__file__).parent / "demo_files"


def demo_experiment_file() -> Path:
    """The bundled experiment file; a :class:`HairlineError` when the package lost it."""
    path = DEMO_FILES / "experiment.toml"
    if not path.is_file():
        raise HairlineError(
            f"the demo's experiment file {path} is missing",
            hint="reinstall hairline (pip install --force-reinstall ...); in a checkout, "
            "`git checkout python/hairline/lab/demo_files examples/sample-service`",
        )
    return path


def demo_config(
    *,
    regress_cpu: float = 0.05,
    trials: int = 7,
    duration_s: float = 4.0,
    rate_per_s: float | None = None,
) -> ExperimentConfig:
    """The bundled experiment, with the regression size and run length given; the rate is
    calibrated (the most precise per minute) unless ``rate_per_s`` is given."""
    config = load_experiment_file(demo_experiment_file())
    arms = dict(config.arms)
    arms["B"] = arms["B"].model_copy(update={"args": ["--regress-cpu", f"{regress_cpu:g}"]})
    load = {"duration_s": duration_s}
    if rate_per_s is not None:
        load |= {"rate_per_s": rate_per_s, "warmup_rate_per_s": rate_per_s}
    return config.model_copy(
        update={
            "arms": arms,
            "design": config.design.model_copy(update={"trials": trials}),
            "load": config.load.model_copy(update=load),
        }
    )
