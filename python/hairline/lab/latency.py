"""Per-request observation rows from the engine's request records: the lab's part of a
batch's measurement that is not one number per arm."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from hairline.collect.registry import LATENCY
from hairline.engine import LoadResult, read_requests
from hairline.errors import ConfigError, EngineError

__all__ = ["latency_rows"]


def latency_rows(result: LoadResult, *, trial: int, batch: int, host_of: Mapping[str, int]) -> Any:
    """Per-request observation rows (a ``pyarrow.Table``) of a run's successful requests.

    Columns follow the observation model: trial, batch, arm, host, request, endpoint,
    metric (``latency_us``, corrected), value (µs) and t (intended send time, seconds
    since the start of the measurement phase).
    """
    import pyarrow as pa  # heavy; only this function needs it

    if result.requests_path is None:
        raise EngineError(
            "latency_rows needs the run's request records",
            hint="run it with requests_path set",
        )
    records = read_requests(result.requests_path)
    ok = records[records["error"] == 0]
    names = np.array(list(result.targets), dtype=object)
    missing = [str(n) for n in names if n not in host_of]
    if missing:
        raise ConfigError(f"host_of has no host for target(s) {missing}")
    hosts = np.array([host_of[str(n)] for n in names], dtype=np.int64)
    endpoints = np.array(result.endpoints, dtype=object)
    n = len(ok)
    return pa.table(
        {
            "trial": np.full(n, trial, dtype=np.int64),
            "batch": np.full(n, batch, dtype=np.int64),
            "arm": pa.array(names[ok["target"]], type=pa.string()),
            "host": hosts[ok["target"]],
            "request": ok["request_id"].astype(np.int64),
            "endpoint": pa.array(endpoints[ok["endpoint"]], type=pa.string()),
            "metric": pa.array([LATENCY.name] * n, type=pa.string()),
            "value": ok["latency_ns"] / 1e3,
            "t": ok["intended_ns"] / 1e9,
        }
    )
