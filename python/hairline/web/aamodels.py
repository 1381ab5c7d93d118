"""The model adaptive selection chooses per metric from a service's A/A runs, for the A/A
page (lab/results.aa_model_choices: the analysis's own rule on the same runs).

Selection scores every candidate model on every A/A run, which on a long history of
per-request rows takes as long as the selection step of an A/B's analysis. So the page
does not wait for it beyond ``wait_s``: one background thread scores a service's runs,
the page says they are being scored (and asks again), and the choice is kept until the
service's set of finished A/A runs or its alpha changes.

    models = HistoryModels(store)
    scored = models.choices("checkout", alpha=0.05)   # None while being scored
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from hairline.errors import HairlineError
from hairline.lab.results import HistoryModel, aa_experiments, aa_model_choices
from hairline.store.db import Store

__all__ = ["HistoryModels", "Scored"]

# Long enough that a short history (a few A/A runs of aggregate metrics: well under a
# second here) is shown on the first load, short enough that a page never hangs.
DEFAULT_WAIT_S = 2.0


@dataclass(frozen=True)
class Scored:
    """A service's choices by metric, or why there are none (``problem``)."""

    models: dict[str, HistoryModel]
    problem: str = ""


_Key = tuple[str, tuple[int, ...], float]


class HistoryModels:
    """Each service's choices, scored once per set of A/A runs and alpha."""

    def __init__(self, store: Store, *, wait_s: float = DEFAULT_WAIT_S) -> None:
        self._store = store
        self._wait_s = wait_s
        self._lock = threading.Lock()
        # One thread: two services' histories are scored one after the other, so the
        # dashboard never takes more than one CPU from the lab's measurements.
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hairline-aa-models")
        self._scored: dict[_Key, Future[Scored]] = {}

    def choices(self, service: str, *, alpha: float) -> Scored | None:
        """The service's choices, or None while its A/A runs are still being scored."""
        ids = aa_experiments(self._store, service)
        key: _Key = (service, tuple(ids), alpha)
        with self._lock:
            future = self._scored.get(key)
            if future is None:
                for old in [k for k in self._scored if k[0] == service]:
                    del self._scored[old]
                future = self._pool.submit(self._score, service, ids, alpha)
                self._scored[key] = future
        try:
            return future.result(timeout=self._wait_s)
        except FutureTimeout:
            return None

    def _score(self, service: str, ids: list[int], alpha: float) -> Scored:
        try:
            return Scored(aa_model_choices(self._store, service, ids=ids, alpha=alpha))
        except (HairlineError, OSError) as err:  # an observations file unreadable or gone
            return Scored({}, problem=str(err))

    def close(self) -> None:
        """Stop scoring: what is queued is dropped, what runs is left to finish."""
        self._pool.shutdown(wait=False, cancel_futures=True)
