"""Running ``hairline-engine load``: find the binary, run a plan, read its summary; the
warm-up and measurement phases the lab runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from hairline.engine.plan import LoadPlan
from hairline.engine.results import LoadResult
from hairline.errors import ConfigError, EngineError
from hairline.kit.procs import child_setup

ENGINE_NAME = "hairline-engine"
# How often run_load's ``check`` is called while the engine runs.
_CHECK_INTERVAL_S = 0.25
EXIT_INVALID = 1  # a run whose validity gate failed under --strict
EXIT_REFUSED = 2  # the engine refused its arguments or input, before sending anything
_REFUSAL_PREFIX = "invalid arguments:"


def find_engine() -> Path:
    """The engine binary: ``$HAIRLINE_ENGINE``, then beside this Python, then ``PATH``."""
    configured = os.environ.get("HAIRLINE_ENGINE")
    if configured:
        path = Path(configured)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise EngineError(
                f"HAIRLINE_ENGINE={configured} is not an executable file",
                hint="point it at target/release/hairline-engine, or unset it",
            )
        return path
    beside_python = Path(sys.executable).parent / ENGINE_NAME
    if beside_python.is_file() and os.access(beside_python, os.X_OK):
        return beside_python
    on_path = shutil.which(ENGINE_NAME)
    if on_path:
        return Path(on_path)
    raise EngineError(
        f"{ENGINE_NAME} not found (looked at $HAIRLINE_ENGINE, {beside_python.parent}, PATH)",
        hint="run `pip install .` (or `make build`), or set HAIRLINE_ENGINE to the binary",
    )


def check_plan(plan: LoadPlan, *, engine: Path | None = None, timeout_s: float = 60) -> None:
    """Ask the engine whether it would run ``plan`` (``load --check``: its flags and its
    whole trace, nothing sent); raise :class:`ConfigError` with every problem it names.
    The rules live in the engine alone, so this is the one way to check a plan early."""
    binary = engine or find_engine()
    command = [str(binary), *plan.to_args(), "--check"]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as err:
        raise EngineError(
            f"hairline-engine load --check did not finish within {timeout_s:.0f} s",
            hint="a very large trace takes long to read; check it with `hairline trace stats`",
        ) from err
    except OSError as err:
        raise EngineError(f"cannot run {binary}: {err}") from err
    if proc.returncode != 0:
        raise engine_failure(proc.returncode, proc.stderr)


def engine_failure(returncode: int, stderr: str) -> ConfigError | EngineError:
    """The error for an engine that exited before running: the plan's problems as a
    :class:`ConfigError` when it refused them, else an :class:`EngineError`."""
    text = stderr.strip().removeprefix(f"{ENGINE_NAME}:").strip().removeprefix("error:").strip()
    if returncode == EXIT_REFUSED and text.startswith(_REFUSAL_PREFIX):
        problems = [line.strip().removeprefix("- ") for line in text.splitlines()[1:]]
        return ConfigError(
            "invalid load plan: " + "; ".join(p for p in problems if p),
            hint="each problem names the engine flag at fault; docs/engine.md explains them",
        )
    return EngineError(
        f"hairline-engine load failed (exit {returncode}):\n{stderr.strip()}",
        hint="the message above names the flag, file or target at fault",
    )


def run_load(
    plan: LoadPlan,
    *,
    timeout_s: float | None = None,
    engine: Path | None = None,
    cpus: Sequence[int] | None = None,
    check: Callable[[], None] | None = None,
) -> LoadResult:
    """Runs the plan to completion and returns its summary; ``cpus`` pins the engine.

    A run that fails a validity gate is returned (``valid`` is false), also under
    ``strict``; a run the engine could not do raises :class:`EngineError`. ``check`` is
    called every quarter second while the engine runs; what it raises stops the engine
    and is raised (a Ray arm's host found gone: the warm-up would wait a minute for it).
    """
    binary = engine or find_engine()
    with tempfile.TemporaryDirectory(prefix="hairline-load-") as tmp:
        summary_path = plan.summary_path or Path(tmp) / "summary.json"
        args = with_summary(plan, summary_path).to_args()
        limit_s = timeout_s if timeout_s is not None else plan.expected_runtime_s() + 30
        command = [str(binary), *args]
        returncode, stderr = _run_engine(command, limit_s=limit_s, cpus=cpus, check=check)
        if returncode not in (0, EXIT_INVALID) or not summary_path.exists():
            raise engine_failure(returncode, stderr)
        return read_summary(summary_path, stderr, plan.requests_path)


def _run_engine(
    command: Sequence[str],
    *,
    limit_s: float,
    cpus: Sequence[int] | None,
    check: Callable[[], None] | None,
) -> tuple[int, str]:
    """The engine's exit status and stderr; killed (and waited for) past ``limit_s`` or
    when ``check`` raises."""
    binary = command[0]
    try:
        proc = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=child_setup(cpus),
        )
    except OSError as err:
        raise EngineError(f"cannot run {binary}: {err}") from err
    deadline = time.monotonic() + limit_s
    with proc:
        try:
            while True:
                try:
                    _, stderr = proc.communicate(timeout=_CHECK_INTERVAL_S if check else limit_s)
                    return proc.returncode, stderr
                except subprocess.TimeoutExpired:
                    if time.monotonic() >= deadline:
                        proc.kill()
                        _, stderr = proc.communicate()
                        raise EngineError(
                            f"hairline-engine load did not finish within {limit_s:.0f} s; "
                            f"stderr:\n{stderr}",
                            hint="raise timeout_s, or check that the targets answer",
                        ) from None
                    if check is not None:
                        check()
        except BaseException:
            if proc.poll() is None:
                proc.kill()
            raise


def with_summary(plan: LoadPlan, path: Path) -> LoadPlan:
    if plan.summary_path == path:
        return plan
    values = {f.name: getattr(plan, f.name) for f in fields(plan)}
    values["summary_path"] = path
    return LoadPlan(**values)


def read_summary(path: Path, stderr: str, requests_path: Path | None) -> LoadResult:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise EngineError(f"cannot read the engine's summary {path}: {err}\n{stderr}") from err
    return LoadResult.from_json(data, requests_path=requests_path)


def warm_up(
    *,
    targets: Mapping[str, str],
    rate_per_s: float,
    duration_s: float,
    trace: Path | None = None,
    paths: Sequence[str] = (),
    warm_urls: Sequence[str] | Mapping[str, str] = (),
    warm_timeout_s: float = 60.0,
    engine: Path | None = None,
    cpus: Sequence[int] | None = None,
    check: Callable[[], None] | None = None,
    **options: Any,
) -> LoadResult:
    """Loads the targets at ``rate_per_s`` for at least ``duration_s`` and, with
    ``warm_urls``, until each of those answers 2xx; nothing of it is meant to be kept.

    ``warm_urls`` may name only some targets: a mapping ``{name: url}``, or URLs that start
    with their target's URL. The engine ends the warm-up with a 1 ms measurement phase,
    whose result is returned for inspection.
    """
    plan = LoadPlan(
        targets=tuple(targets.items()),
        trace=trace,
        paths=tuple(paths),
        rate_per_s=rate_per_s,
        duration_s=0.001,
        warmup_rate_per_s=rate_per_s,
        warmup_duration_s=duration_s,
        warm_urls=_named_warm_urls(targets, warm_urls),
        warm_timeout_s=warm_timeout_s,
        **options,
    )
    return run_load(plan, engine=engine, cpus=cpus, check=check)


def _named_warm_urls(
    targets: Mapping[str, str], warm_urls: Sequence[str] | Mapping[str, str]
) -> tuple[str, ...]:
    if isinstance(warm_urls, Mapping):
        return tuple(f"{name}={url}" for name, url in warm_urls.items())
    if len(warm_urls) == len(targets) or not warm_urls:
        return tuple(warm_urls)
    named = []
    for url in warm_urls:
        owners = [n for n, base in targets.items() if url.startswith(base.rstrip("/") + "/")]
        if len(owners) != 1:
            raise ConfigError(
                f"warm URL {url} belongs to {len(owners)} targets; cannot tell whose it is",
                hint="pass warm_urls as a mapping {target name: url}",
            )
        named.append(f"{owners[0]}={url}")
    return tuple(named)


def measure(
    *,
    targets: Mapping[str, str],
    rate_per_s: float,
    duration_s: float,
    trace: Path | None = None,
    paths: Sequence[str] = (),
    requests_path: Path | None = None,
    summary_path: Path | None = None,
    engine: Path | None = None,
    cpus: Sequence[int] | None = None,
    check: Callable[[], None] | None = None,
    **options: Any,
) -> LoadResult:
    """One measurement phase to every target in lockstep; ``options`` are other
    :class:`LoadPlan` fields. Keep ``requests_path`` to get :func:`latency_rows` later."""
    plan = LoadPlan(
        targets=tuple(targets.items()),
        trace=trace,
        paths=tuple(paths),
        rate_per_s=rate_per_s,
        duration_s=duration_s,
        requests_path=requests_path,
        summary_path=summary_path,
        **options,
    )
    return run_load(plan, engine=engine, cpus=cpus, check=check)
