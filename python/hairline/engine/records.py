"""The ``--requests`` file: one fixed-size record per request, mapped into numpy."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from hairline.errors import DataError

#: One record of the ``--requests`` file (docs/engine.md, "Request records").
#: One record of the ``--requests`` file (docs/engine.md, "Request records").
REQUEST_DTYPE = np.dtype(
    [
        ("request_id", "<u8"),
        ("intended_ns", "<u8"),
        ("latency_ns", "<u8"),
        ("uncorrected_ns", "<u8"),
        ("bytes", "<u4"),
        ("status", "<u2"),
        ("target", "<u2"),
        ("endpoint", "<u2"),
        ("error", "u1"),
        ("_pad", "V5"),
    ]
)
#: The engine's limits (docs/engine.md): requests per second per target, seconds per phase,
_REQUESTS_MAGIC = b"HLREQS\0\0"
_REQUESTS_VERSION = 1
_REQUESTS_HEADER_BYTES = 16


def read_requests(path: str | os.PathLike[str]) -> NDArray[np.void]:
    """The ``--requests`` file as a structured array of :data:`REQUEST_DTYPE`."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            header = f.read(_REQUESTS_HEADER_BYTES)
        size = p.stat().st_size
    except OSError as err:
        raise DataError(f"cannot read request records {p}: {err}") from err
    if len(header) < _REQUESTS_HEADER_BYTES or header[:8] != _REQUESTS_MAGIC:
        raise DataError(
            f"{p} is not a hairline request-record file (bad magic)",
            hint="pass the file written by `hairline-engine load --requests`",
        )
    version = int.from_bytes(header[8:12], "little")
    record_bytes = int.from_bytes(header[12:16], "little")
    if version != _REQUESTS_VERSION or record_bytes != REQUEST_DTYPE.itemsize:
        raise DataError(
            f"{p}: record format version {version} with {record_bytes}-byte records; this "
            f"hairline reads version {_REQUESTS_VERSION} with {REQUEST_DTYPE.itemsize}-byte ones",
            hint="read it with the hairline version that wrote it",
        )
    body = size - _REQUESTS_HEADER_BYTES
    if body % record_bytes:
        raise DataError(
            f"{p}: {body} bytes of records is not a whole number of {record_bytes}-byte records",
            hint="the file is truncated; was the engine killed with SIGKILL?",
        )
    records: NDArray[np.void] = np.fromfile(p, dtype=REQUEST_DTYPE, offset=_REQUESTS_HEADER_BYTES)
    return records
