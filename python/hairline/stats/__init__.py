"""hairline.stats: the statistics of the papers, as pure functions on numpy arrays.

No I/O, no clock; every random choice takes an ``rng``. Observations come in as a
:class:`MetricSample`; every model returns a :class:`Comparison`; :mod:`verdict` turns
comparisons into regression / improvement / no change / inconclusive.

- ServiceLab (OSDI'24 section 4.2): t-tests with preprocessing (:mod:`ttest`,
  :mod:`preprocess`), the permutation test on per-trial differences (:mod:`permutation`),
  the confidence-interval test from A/A history (:mod:`citest`), adaptive model selection
  (:mod:`selection`), EMA warm-up detection (:mod:`warmup`).
- Perflab (sections 3-5): the four designs and their standard errors (:mod:`designs`), the
  random-effects simulator (:mod:`simulate`), the clustered bootstrap (:mod:`bootstrap`),
  trials and design planning (:mod:`planning`).
- HHVM autotuning (ICPE'23 section 5.1): relative effects with delta-method intervals and
  the 355·S² sample-size rule (:mod:`relative`).
"""

from hairline.stats._modelkit import DegenerateDataWarning
from hairline.stats.bootstrap import bootstrap_compare
from hairline.stats.data import ARM_A, ARM_B, Comparison, MetricSample
from hairline.stats.models import get_model, list_models, run_model
from hairline.stats.selection import fallback_model, select_model
from hairline.stats.verdict import MetricRule, Verdict, decide, verdicts
from hairline.stats.warmup import cut_warmup

__all__ = [
    "ARM_A",
    "ARM_B",
    "Comparison",
    "DegenerateDataWarning",
    "MetricRule",
    "MetricSample",
    "Verdict",
    "bootstrap_compare",
    "cut_warmup",
    "decide",
    "fallback_model",
    "get_model",
    "list_models",
    "run_model",
    "select_model",
    "verdicts",
]
