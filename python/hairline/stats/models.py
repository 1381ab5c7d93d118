"""The model registry: a model is a statistical test plus a preprocessing
(servicelab-osdi24 section 4.2), looked up by name.

Every model is called the same way, ``model(sample, alpha=..., rng=..., history=...)``, and
returns a :class:`~hairline.stats.data.Comparison` whose ``effect_rel`` and ``ci_rel`` are in
the metric's original units:

- the p-value is the model's test on the preprocessed data;
- the interval inverts the same test (every shift it does not reject), so it excludes 0
  exactly when p < alpha; relative to the model's baseline location: plain means for
  ``none``, capped or trimmed means for the outlier methods (already in the metric's units),
  and for ``sqrt`` the squared mean of square roots, with ratios squared on the way back
  (exact when a change scales every observation, see :mod:`hairline.stats._modelkit`);
- ``ci_abs`` is ``ci_rel`` times the model's baseline location.

Names:

=========================  ======================================================
``t-test-<p>``             Student's t-test on rows, one trial (:mod:`.ttest`)
``welch-<p>``              Welch's t-test on rows, one trial
``permutation-<p>``        sign-flip test on per-trial mean differences (:mod:`.permutation`)
``paired-t-<p>``           paired t-test on per-trial mean differences (:mod:`.paired`)
``trimmed-t-<p>``          Yuen's 20%-trimmed t-test on per-trial relative differences
                           (:mod:`.trimmed`): one outlying trial cannot overturn it
``ci-test``                A/A history gives the threshold (:mod:`.citest`); needs history
``bootstrap-<cluster>``    Perflab's bootstrap, clustered by iid, request, host or host-block
=========================  ======================================================

with ``<p>`` one of none, sqrt, outlier-elim, outlier-cap. The paper's seven production models
are t-test-none, t-test-sqrt, t-test-outlier-elim, t-test-outlier-cap, permutation-none,
permutation-sqrt and ci-test (its "confidence-interval-none").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from hairline.stats.citest import ci_test
from hairline.stats.data import Comparison, MetricSample
from hairline.stats.paired import paired_t_test
from hairline.stats.permutation import permutation_test
from hairline.stats.preprocess import PREPROCESSINGS, Preprocessing
from hairline.stats.trimmed import trimmed_t_test
from hairline.stats.ttest import t_test

__all__ = [
    "PAPER_MODELS",
    "History",
    "Model",
    "ModelInfo",
    "get_model",
    "list_models",
    "model_info",
    "per_trial_fallback",
    "run_model",
]

History = Sequence[MetricSample | float]


class Model(Protocol):
    """What every registered model is: sample in, comparison out."""

    def __call__(
        self,
        sample: MetricSample,
        *,
        alpha: float,
        rng: np.random.Generator,
        history: History | None,
    ) -> Comparison: ...


@dataclass(frozen=True)
class ModelInfo:
    """A registered model: its parts, the columns it needs, and the callable."""

    name: str
    test: str
    preprocessing: str
    needs_columns: tuple[str, ...]
    needs_history: bool
    min_trials: int
    description: str
    run: Model


PAPER_MODELS: tuple[str, ...] = (
    "t-test-none",
    "t-test-sqrt",
    "t-test-outlier-elim",
    "t-test-outlier-cap",
    "permutation-none",
    "permutation-sqrt",
    "ci-test",
)


def _history_free(
    test: Callable[[MetricSample, float, np.random.Generator], Comparison],
) -> Model:
    """A model from a test that needs only the sample, alpha and an rng."""

    def run(
        sample: MetricSample,
        *,
        alpha: float,
        rng: np.random.Generator,
        history: History | None,
    ) -> Comparison:
        return test(sample, alpha, rng)

    return run


def _t_model(preprocessing: Preprocessing, *, equal_var: bool) -> Model:
    return _history_free(
        lambda s, alpha, _: t_test(s, alpha=alpha, equal_var=equal_var, preprocessing=preprocessing)
    )


def _permutation_model(preprocessing: Preprocessing) -> Model:
    return _history_free(
        lambda s, alpha, rng: permutation_test(s, alpha=alpha, rng=rng, preprocessing=preprocessing)
    )


def _paired_model(preprocessing: Preprocessing) -> Model:
    return _history_free(
        lambda s, alpha, _: paired_t_test(s, alpha=alpha, preprocessing=preprocessing)
    )


def _trimmed_model(preprocessing: Preprocessing) -> Model:
    return _history_free(
        lambda s, alpha, _: trimmed_t_test(s, alpha=alpha, preprocessing=preprocessing)
    )


def _ci_model(
    sample: MetricSample,
    *,
    alpha: float,
    rng: np.random.Generator,
    history: History | None,
) -> Comparison:
    return ci_test(sample, history, alpha=alpha)


def _bootstrap_model(name: str, cluster: str) -> Model:
    def run(
        sample: MetricSample,
        *,
        alpha: float,
        rng: np.random.Generator,
        history: History | None,
    ) -> Comparison:
        # Imported on use: the bootstrap module is heavier and optional for callers that only
        # want the ServiceLab models.
        from hairline.stats.bootstrap import bootstrap_compare

        result = bootstrap_compare(sample, cluster=cluster, alpha=alpha, rng=rng)
        return dataclasses.replace(result, model=name)

    return run


def _flag_same_constant(run: Model) -> Model:
    """``details["same_constant"] = 1`` when every row of both arms holds one value (an
    error rate of 0 in each): the verdict then says no change whatever the test could say,
    since there is no difference to explain (a sign-flip test with 4 trials cannot even
    bound a shift of exactly nothing)."""

    def flagged(
        sample: MetricSample,
        *,
        alpha: float,
        rng: np.random.Generator,
        history: History | None,
    ) -> Comparison:
        result = run(sample, alpha=alpha, rng=rng, history=history)
        values = sample.value
        if len(values) and bool(np.all(values == values[0])):
            return dataclasses.replace(result, details={**result.details, "same_constant": 1.0})
        return result

    return flagged


def _build() -> dict[str, ModelInfo]:
    registry: dict[str, ModelInfo] = {}
    for test, equal_var in (("t-test", True), ("welch", False)):
        for pre in PREPROCESSINGS:
            name = f"{test}-{pre}"
            registry[name] = ModelInfo(
                name=name,
                test=test,
                preprocessing=pre,
                needs_columns=(),
                needs_history=False,
                min_trials=1,
                description=(
                    f"{'Student' if equal_var else 'Welch'} t-test on rows after {pre}; "
                    f"for single-trial experiments"
                ),
                run=_t_model(pre, equal_var=equal_var),
            )
    for test, make, what in (
        ("permutation", _permutation_model, "sign-flip test on per-trial mean differences"),
        ("paired-t", _paired_model, "paired t-test on per-trial mean differences"),
        ("trimmed-t", _trimmed_model, "Yuen's 20%-trimmed t-test on per-trial differences"),
    ):
        for pre in PREPROCESSINGS:
            name = f"{test}-{pre}"
            registry[name] = ModelInfo(
                name=name,
                test=test,
                preprocessing=pre,
                needs_columns=("trial",),
                needs_history=False,
                min_trials=2,
                description=f"{what} after {pre}",
                run=make(pre),
            )
    registry["ci-test"] = ModelInfo(
        name="ci-test",
        test="ci-test",
        preprocessing="none",
        needs_columns=(),
        needs_history=True,
        min_trials=1,
        description="threshold from the spread of historical A/A runs",
        run=_ci_model,
    )
    for cluster, needs in (
        ("iid", ()),
        ("request", ("request",)),
        ("host", ("host",)),
        ("host-block", ("host", "request")),
    ):
        name = f"bootstrap-{cluster}"
        registry[name] = ModelInfo(
            name=name,
            test="bootstrap",
            preprocessing="none",
            needs_columns=needs,
            needs_history=False,
            min_trials=1,
            description=f"Perflab bootstrap resampling {cluster} clusters",
            run=_bootstrap_model(name, cluster),
        )
    return registry


_REGISTRY = {
    name: dataclasses.replace(info, run=_flag_same_constant(info.run))
    for name, info in _build().items()
}


def list_models() -> list[str]:
    """Every registered model name, in registry order (t-tests, permutation, paired t,
    trimmed t, ci, bootstrap)."""
    return list(_REGISTRY)


def model_info(name: str) -> ModelInfo:
    """The registered model ``name``; an unknown name is a ``ValueError`` listing them all."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; valid models: {', '.join(_REGISTRY)}") from None


def get_model(name: str) -> Model:
    """The callable of model ``name`` (``ValueError`` listing valid names if unknown)."""
    return model_info(name).run


def _validate_run_model(info: ModelInfo, sample: MetricSample, history: History | None) -> None:
    sample.require(*info.needs_columns)
    if info.needs_history and not history:
        raise ValueError(
            f"model {info.name!r} needs history (A/A runs of the same service and metric); "
            f"pass them, or choose a model that does not, such as "
            f"{_history_free_hint(sample)!r}"
        )


def _history_free_hint(sample: MetricSample) -> str:
    """A model that runs without history on this sample (for error messages)."""
    trials = 0 if sample.trial is None else len(np.unique(sample.trial))
    return per_trial_fallback(trials)


#: From this many trials the trimmed t-test trims at least one trial at each end (20%).
MIN_TRIMMED_TRIALS = 5


def per_trial_fallback(trials: int) -> str:
    """The model for ``trials`` trials when there is no history to choose one from.

    ``trimmed-t-none`` from 5 trials, where 20% trimming drops at least one trial at each
    end and one outlying trial can no longer overturn the verdict (the simulations in
    tests/stats/test_trimmed.py and docs/stats.md); ``paired-t-none`` with 2 to 4 trials,
    where nothing can be trimmed and the trimmed test is the same t-test; ``welch-none``
    for a single trial.
    """
    if trials >= MIN_TRIMMED_TRIALS:
        return "trimmed-t-none"
    if trials >= 2:
        return "paired-t-none"
    return "welch-none"


def run_model(
    name: str,
    sample: MetricSample,
    *,
    rng: np.random.Generator,
    alpha: float = 0.05,
    history: History | None = None,
) -> Comparison:
    """Run model ``name`` on ``sample``, checking first the columns and history it needs."""
    info = model_info(name)
    _validate_run_model(info, sample, history)
    return info.run(sample, alpha=alpha, rng=rng, history=history)
