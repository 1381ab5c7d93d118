"""Experiment files as the lab reads them: config's own checks plus the lab's, in one round.

:func:`hairline.config.load_experiment` checks what config knows (fields, types, paths,
placeholders, metric names). The lab adds what it knows, reported with the same file, line
and fix in the same error: that the analysis model is one the statistics have, and that the
trace's first lines parse as the engine will parse them (a file of garbage is caught by
``hairline run --check``, not after the build).
"""

from __future__ import annotations

import itertools
import re
import shlex
from collections.abc import Sequence
from pathlib import Path

from hairline.config import ExperimentConfig, Report, load_experiment
from hairline.config.load import ExtraCheck
from hairline.config.tomlcheck import Report as FieldReport
from hairline.errors import ConfigError, DataError
from hairline.stats import list_models
from hairline.trace.format import parse_trace_text

__all__ = [
    "TRACE_LINES_CHECKED",
    "backend_checks",
    "listens_on_the_node",
    "load_experiment_file",
    "load_named_experiment",
]

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


# A literal loopback address in a word of a start command (``127.0.0.1``,
# ``--host=localhost``, ``[::1]:8080``): what a test machine's health check cannot reach.
_LOOPBACK = re.compile(r"(?:^|[=:/@ ])(127(?:\.\d{1,3}){3}|localhost|\[?::1\]?)(?::[\d{}a-z]+)?$")
# Listening on every address, said explicitly: reachable at the node's address too.
_ANY_ADDRESS = re.compile(r"(?:^|[=:/@ ])(0\.0\.0\.0|\[?::\]?)(?::[\d{}a-z]+)?$")


def listens_on_the_node(config: ExperimentConfig, path: Path, report: Report) -> None:
    """On the ray backend an arm runs on a test machine and is health-checked and loaded at
    that machine's address, which ``{host}`` is: a start command that binds a loopback
    address, or names no address at all (many services then listen on 127.0.0.1), gets no
    answer there. A static check of the command's words, the arms' args included."""
    try:
        words = shlex.split(config.service.start)
    except ValueError:
        return  # config reports a start command it cannot split
    words += [a for arm in config.arms.values() for a in arm.args]
    fix = (
        "listen on {host}, the test machine's address (127.0.0.1 on the local backend): "
        'pass it to the service\'s listen option, e.g. "--host {host}" (docs/scale-out.md)'
    )
    for word in words:
        found = _LOOPBACK.search(word)
        if found:
            report(("service",), f"the start command listens on {found.group(1)} ({word!r}), "
                   "which a test machine of the ray backend does not answer on", fix)  # fmt: skip
            return
    if not any("{host}" in w or _ANY_ADDRESS.search(w) for w in words):
        report(("service",), "the start command names no {host}: on the ray backend the "
               "service must listen on the test machine's address, where its health check "
               "and load come from", fix + "; or 0.0.0.0 to listen on every address")  # fmt: skip


def backend_checks(backend: str) -> tuple[ExtraCheck, ...]:
    """The checks of an experiment file that only one backend needs."""
    return (listens_on_the_node,) if backend == "ray" else ()


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
