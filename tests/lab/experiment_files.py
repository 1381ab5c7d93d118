"""The sample service's experiment files, as the lab's end-to-end tests write them.

Both end-to-end files (tests/lab/test_lab_e2e.py on this machine's CPU sets,
tests/lab/test_ray_e2e.py on a Ray cluster) start from one template, and each test says
only what it changes, in the shape of the TOML it becomes::

    exp = write_experiment(
        tmp_path / "hw",
        tag="hw",
        arms={"A": {"hosts": {"server_type": "test-vm"}},
              "B": {"hosts": {"server_type": "test-vm-b"}}},
        design={"mode": "hardware", "trials": 3},
    )
    hairline("run", str(exp.path), ...)

writes ``service.toml`` and ``experiment.toml`` into the folder, with ``[arms.A] hosts =
{ server_type = "test-vm" }`` and so on. A value of None leaves a default key out (``load=
{"rate_per_s": None, "target_utilization": 0.5}`` makes the lab calibrate the rate).
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from schema_check import check_toml

__all__ = ["AB", "Experiment", "write_experiment"]

EXAMPLE = Path(__file__).parents[2] / "examples" / "sample-service"

# Two arms of one build: the baseline A and a candidate B that adds nothing.
AB: Mapping[str, Mapping[str, object]] = {"A": {}, "B": {}}

_SERVICE = {
    "health": "/healthz",
    "health_timeout_s": 10,
    "warm": "/warm",
    "metrics_path": "/metrics",
    "counters": ["sample_downstream_reads_total"],
}
_THRESHOLDS = {"cpu_ns_per_request": "2%", "anon_memory_bytes": "5%"}
_LOAD = {"rate_per_s": 300, "duration_s": 1.0, "warmup_duration_s": 0.3}
_DESIGN = {"trials": 3}


@dataclass(frozen=True)
class Experiment:
    """The files written, and ``marker``: a string in every arm's command line and in no
    other test's (the arms' warm-up time), to find the arms' processes by."""

    path: Path
    service_path: Path
    marker: str


def _value(value: object) -> str:
    """One TOML value: strings (JSON's escapes are TOML's), numbers, booleans, arrays and
    inline tables."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path):
        return json.dumps(str(value))
    if isinstance(value, Mapping):
        items = [f"{k} = {_value(v)}" for k, v in value.items() if v is not None]
        return "{ " + ", ".join(items) + " }" if items else "{}"
    if isinstance(value, Sequence):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


def _table(name: str, values: Mapping[str, object]) -> str:
    lines = [f"[{name}]", *(f"{k} = {_value(v)}" for k, v in values.items() if v is not None)]
    return "\n".join(lines) + "\n"


def _marker(tag: str) -> str:
    """A warm-up time unique to this test process and tag, all of one width, so that no
    marker is the start of another."""
    return f"0.3{os.getpid() % 1000:03d}{zlib.crc32(tag.encode()) % 10000:04d}"


def write_experiment(
    folder: Path,
    *,
    tag: str,
    arms: Mapping[str, Mapping[str, object]] = AB,
    load: Mapping[str, object] | None = None,
    design: Mapping[str, object] | None = None,
    analysis: Mapping[str, object] | None = None,
    mode: Mapping[str, object] | None = None,
    hosts: Mapping[str, object] | None = None,
    service: Mapping[str, object] | None = None,
    thresholds: Mapping[str, str] | None = None,
    start_args: str = "",
    wrap: str | None = None,
    valid: bool = True,
) -> Experiment:
    """An experiment of the sample service (service ``sample-<tag>``) in ``folder``.

    ``arms``, ``load``, ``design``, ``analysis``, ``mode`` and ``hosts`` are the experiment
    file's tables (``load`` and ``design`` over the defaults: 300 requests/s for 1.5 s after a 0.5 s
    warm-up, three trials); ``service`` changes the service file's ``[service]`` and
    ``thresholds`` add to its ``[service.metrics]`` (CPU 2%, anonymous memory 5%).
    ``start_args`` go on the sample service's command line; ``wrap`` is a shell command
    around it, with ``{command}`` where the service's command goes (a start command that
    also leaves a daemon behind, say). Both files are checked against their JSON Schemas
    (docs/schema/experiment.json, service.json) unless ``valid`` is False (a test of the
    reader's errors).
    """
    folder.mkdir(parents=True, exist_ok=True)
    marker = _marker(tag)
    command = f"{{engine}} sample-service --host {{host}} --port {{port}} --warmup-s {marker}"
    if start_args:
        command += f" {start_args}"
    start = wrap.replace("{command}", command) if wrap is not None else command
    # name and start first: a test reads an error about start at service.toml line 3.
    service_table = {"name": f"sample-{tag}", "start": start, **_SERVICE, **(service or {})}
    service_path = folder / "service.toml"
    metrics = {m: {"threshold": t} for m, t in {**_THRESHOLDS, **(thresholds or {})}.items()}
    service_path.write_text(
        _table("service", service_table) + "\n" + _table("service.metrics", metrics)
    )
    parts = [f'service = "service.toml"\ntrace = {_value(EXAMPLE / "trace.jsonl")}\n']
    parts += [_table(f"arms.{name}", arm) for name, arm in arms.items()]
    parts.append(_table("load", {**_LOAD, **(load or {})}))
    parts.append(_table("design", {**_DESIGN, **(design or {})}))
    if analysis:
        parts.append(_table("analysis", analysis))
    if mode:
        parts.append(_table("mode", mode))
    if hosts:
        parts.append(_table("hosts", hosts))
    path = folder / "experiment.toml"
    path.write_text("\n".join(parts))
    if valid:
        check_toml("experiment", path)
        check_toml("service", service_path)
    return Experiment(path=path, service_path=service_path, marker=f"--warmup-s {marker}")
