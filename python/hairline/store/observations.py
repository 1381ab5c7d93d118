"""Observation files: the one table every analysis reads.

An observations file has one row per measurement, with the columns of DESIGN.md's data
model: ``experiment, trial, batch, arm, host, request, endpoint, metric, value, t``. Only
``arm``, ``metric`` and ``value`` are required; a method that needs another column says so.
Files are Parquet (what the lab writes) or CSV (what people write by hand).

Reading validates once, at the edge: a missing column, a single arm, an empty or
non-numeric value is a :class:`~hairline.errors.DataError` naming the file, the column and
the row (and for CSV the line), so nothing downstream re-checks.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from hairline.errors import DataError
from hairline.kit.atomic import atomic_path
from hairline.profile.functions import is_function_row
from hairline.stats.data import ARM_A, ARM_B, MetricSample

__all__ = [
    "COLUMNS",
    "REQUIRED_COLUMNS",
    "Observations",
    "observations_from_table",
    "read_observations",
    "write_observations",
]

COLUMNS = (
    "experiment",
    "trial",
    "batch",
    "arm",
    "host",
    "request",
    "endpoint",
    "metric",
    "value",
    "t",
)
REQUIRED_COLUMNS = ("arm", "metric", "value")
_CODED_COLUMNS = ("trial", "batch", "host", "request")


@dataclass(frozen=True)
class Observations:
    """A validated observations table.

    ``arms`` lists the arm labels in order of first appearance unless a label ``A`` exists,
    in which case it comes first: the first arm is the baseline.
    """

    table: pa.Table
    source: str
    arms: tuple[str, ...]
    metrics: tuple[str, ...]

    def __len__(self) -> int:
        return int(self.table.num_rows)

    @property
    def baseline(self) -> str:
        return self.arms[0]

    def samples(self, *, baseline: str | None = None) -> Iterator[tuple[str, str, MetricSample]]:
        """Yield ``(metric, candidate_arm, sample)`` comparing each other arm to the baseline.

        Categorical columns (trial, batch, host, request) become integer codes; rows of a
        metric keep their file order, so time series stay in order.
        """
        base = baseline or self.baseline
        if base not in self.arms:
            raise DataError(
                f"{self.source}: baseline arm {base!r} does not occur in column 'arm'",
                hint=f"choose one of {', '.join(self.arms)}",
            )
        arm_col = self.table.column("arm")
        metric_col = self.table.column("metric")
        for metric in self.metrics:
            for candidate in self.arms:
                if candidate == base:
                    continue
                mask = pc.and_(
                    pc.equal(metric_col, metric),
                    pc.or_(pc.equal(arm_col, base), pc.equal(arm_col, candidate)),
                )
                rows = self.table.filter(mask)
                arm = np.where(
                    rows.column("arm").to_numpy(zero_copy_only=False) == base, ARM_A, ARM_B
                )
                if not (arm == ARM_A).any() or not (arm == ARM_B).any():
                    continue
                coded = {
                    name: _codes(rows.column(name)) if name in rows.column_names else None
                    for name in _CODED_COLUMNS
                }
                t = (
                    rows.column("t").to_numpy(zero_copy_only=False).astype(np.float64)
                    if "t" in rows.column_names
                    else None
                )
                yield (
                    metric,
                    candidate,
                    MetricSample.from_arrays(
                        rows.column("value").to_numpy(zero_copy_only=False),
                        arm,
                        t=t,
                        **coded,
                    ),
                )


def _codes(column: pa.ChunkedArray) -> np.ndarray:
    """Dense integer codes for a categorical column (nulls become -1)."""
    encoded = pc.dictionary_encode(column).combine_chunks()
    codes = pc.fill_null(pc.cast(encoded.indices, pa.int64()), -1)
    return np.asarray(codes.to_numpy(zero_copy_only=False), dtype=np.int64)


def read_observations(path: str | os.PathLike[str]) -> Observations:
    """Read and validate a ``.parquet`` or ``.csv`` observations file."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"{p}: no such file", hint="give the path of an observations file")
    suffix = p.suffix.lower()
    try:
        if suffix == ".parquet":
            table = pq.read_table(p)
            is_csv = False
        elif suffix == ".csv":
            table = pacsv.read_csv(
                p,
                convert_options=pacsv.ConvertOptions(
                    column_types={"value": pa.string(), "arm": pa.string(), "metric": pa.string()}
                ),
            )
            is_csv = True
        else:
            raise DataError(
                f"{p}: unknown file type {suffix!r}",
                hint="observations are .parquet or .csv files",
            )
    except (pa.ArrowInvalid, OSError) as err:
        raise DataError(f"{p}: cannot be read: {err}") from err
    return _validate(table, source=str(p), is_csv=is_csv)


def observations_from_table(table: pa.Table, *, source: str) -> Observations:
    """Validate a table made in memory (the lab's trials) as if it had been read."""
    return _validate(table, source=source, is_csv=False)


def _where(row: int, *, is_csv: bool) -> str:
    # Rows are 1-based for people; a CSV row also gets its line, the header being line 1.
    return f"row {row + 1} (line {row + 2})" if is_csv else f"row {row + 1}"


def _validate(table: pa.Table, *, source: str, is_csv: bool) -> Observations:
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        raise DataError(
            f"{source}: missing column{'s' if len(missing) > 1 else ''} "
            f"{', '.join(map(repr, missing))}",
            hint=f"an observations file needs at least {', '.join(REQUIRED_COLUMNS)}; "
            f"it has {', '.join(table.column_names) or 'no columns'}",
        )
    if table.num_rows == 0:
        raise DataError(f"{source}: has no rows", hint="an analysis needs observations of two arms")

    for name in ("arm", "metric"):
        col = table.column(name)
        if col.null_count:
            row = _first_true(pc.is_null(col))
            raise DataError(
                f"{source}: column {name!r} is empty at {_where(row, is_csv=is_csv)}",
                hint=f"every observation needs its {name}",
            )
        if not pa.types.is_string(col.type):
            table = table.set_column(
                table.column_names.index(name), name, pc.cast(col, pa.string())
            )

    table = table.set_column(
        table.column_names.index("value"),
        "value",
        _numeric_value(table.column("value"), source, is_csv),
    )
    if "t" in table.column_names:
        t_col = table.column("t")
        if not (pa.types.is_floating(t_col.type) or pa.types.is_integer(t_col.type)):
            raise DataError(
                f"{source}: column 't' must be numeric seconds, found {t_col.type}",
                hint="write t as seconds since the start of the measurement phase",
            )

    arm_values = table.column("arm").to_numpy(zero_copy_only=False)
    arms = list(dict.fromkeys(arm_values.tolist()))
    if "A" in arms:
        arms.remove("A")
        arms.insert(0, "A")
    if len(arms) < 2:
        raise DataError(
            f"{source}: column 'arm' has a single arm {arms[0]!r}",
            hint="a comparison needs a baseline and a candidate, e.g. rows with arm A and arm B",
        )
    names = dict.fromkeys(table.column("metric").to_numpy(zero_copy_only=False).tolist())
    # Functions' rows (fn.*: [service.profile]) are analysed apart (lab/functions.py):
    # hundreds of them are not the service's metrics.
    metrics = tuple(m for m in names if not is_function_row(m))
    return Observations(table=table, source=source, arms=tuple(arms), metrics=metrics)


def _numeric_value(col: pa.ChunkedArray, source: str, is_csv: bool) -> pa.ChunkedArray:
    if col.null_count:
        row = _first_true(pc.is_null(col))
        raise DataError(
            f"{source}: column 'value' is empty at {_where(row, is_csv=is_csv)}",
            hint="every observation needs a numeric value; drop the row or fill it in",
        )
    if pa.types.is_floating(col.type) or pa.types.is_integer(col.type):
        values = pc.cast(col, pa.float64())
    else:
        try:
            values = pc.cast(col, pa.float64())
        except pa.ArrowException:
            # Only on the error path do we walk the rows, to name the first bad one.
            for i, raw in enumerate(col.to_pylist()):
                if raw is None or not str(raw).strip():
                    raise DataError(
                        f"{source}: column 'value' is empty at {_where(i, is_csv=is_csv)}",
                        hint="every observation needs a numeric value; drop the row or fill it in",
                    ) from None
                try:
                    float(raw)
                except (TypeError, ValueError):
                    raise DataError(
                        f"{source}: column 'value' is not numeric at "
                        f"{_where(i, is_csv=is_csv)}: {raw!r}",
                        hint="values are numbers in the metric's unit (e.g. 1234.5)",
                    ) from None
            raise
    finite = pc.is_finite(values)
    if not pc.all(finite).as_py():
        row = _first_true(pc.invert(finite))
        raise DataError(
            f"{source}: column 'value' is not finite at {_where(row, is_csv=is_csv)}",
            hint="drop NaN and infinite values before analysis",
        )
    return values


def _first_true(mask: pa.ChunkedArray | pa.Array) -> int:
    return int(np.flatnonzero(mask.to_numpy(zero_copy_only=False))[0])


def write_observations(path: str | os.PathLike[str], table: pa.Table) -> Path:
    """Write ``table`` as Parquet atomically: a reader never sees a half-written file."""
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return Path(path)
