"""Experiment files as the lab reads them: config's own checks plus the lab's, in one round.

:func:`hairline.config.load_experiment` checks what config knows (fields, types, paths,
placeholders, metric names). The lab adds what it knows, reported with the same file, line
and fix in the same error: that the analysis model is one the statistics have, and that the
trace's first lines parse as the engine will parse them (a file of garbage is caught by
``hairline run --check``, not after the build).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

from hairline.config import ExperimentConfig, Report, load_experiment
from hairline.config.load import ExtraCheck
from hairline.config.tomlcheck import Report as FieldReport
from hairline.errors import ConfigError, DataError
from hairline.stats import list_models
from hairline.trace.format import parse_trace_text

__all__ = ["TRACE_LINES_CHECKED", "load_experiment_file", "load_named_experiment"]

# Enough lines to catch a wrong file or a broken writer, few enough to stay instant.
TRACE_LINES_CHECKED = 50


def _model_is_known(config: ExperimentConfig, path: Path, report: Report) -> None:
    models = list_models()
    if config.analysis.model != "adaptive" and config.analysis.model not in models:
        report(
            ("analysis", "model"),
            f"unknown model {config.analysis.model!r}",
            f"use adaptive or one of {', '.join(models)}",
        )


def _trace_starts_well(config: ExperimentConfig, path: Path, report: Report) -> None:
    trace = path.parent / config.trace
    if not trace.is_file():
        return  # config reports the missing file
    try:
        with trace.open("rb") as f:
            head = b"".join(itertools.islice(f, TRACE_LINES_CHECKED))
        parse_trace_text(head.decode("utf-8", errors="strict"), source=str(trace))
    except UnicodeDecodeError:
        report(("trace",), f"{config.trace!r} is not UTF-8 text", "give a hairline trace file")
    except DataError as err:
        report(
            ("trace",),
            f"{config.trace!r} does not start as a trace: {err.message}",
            "give a trace in hairline's format (docs/trace-format.md); "
            "`hairline trace import` converts HAR files and access logs",
        )


def load_experiment_file(path: Path, *, checks: Sequence[ExtraCheck] = ()) -> ExperimentConfig:
    """Read an experiment file with every check, config's and the lab's, in one round;
    ``checks`` are the caller's own, in the same round (the HTTP API's rules for what a
    submitted file may run)."""
    return load_experiment(path, checks=(_model_is_known, _trace_starts_well, *checks))


def load_named_experiment(path: Path, report: FieldReport) -> ExperimentConfig | None:
    """The experiment file a tuning (or attribution) file names, or None after reporting
    its problems as the naming field's."""
    try:
        return load_experiment_file(path)
    except ConfigError as err:
        first = err.message.splitlines()
        report(
            ("experiment",),
            f"the experiment file has problems: {' / '.join(first[1:4])}"
            if len(first) > 1
            else err.message,
            err.hint or "fix the experiment file",
        )
        return None
