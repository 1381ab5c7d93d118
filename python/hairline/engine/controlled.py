"""A ``--control`` run: the rate changed while the engine runs, each interval read back."""

from __future__ import annotations

import contextlib
import json
import math
import queue
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO

from hairline.engine.plan import LoadPlan
from hairline.engine.results import IntervalStats, LoadResult
from hairline.engine.run import (
    EXIT_INVALID,
    engine_failure,
    find_engine,
    read_summary,
    with_summary,
)
from hairline.errors import ConfigError, EngineError
from hairline.kit import interrupts
from hairline.kit.procs import child_setup, stop_process

_DONE = object()


class ControlledLoad:
    """A ``--control`` run: change the rate while it goes and read each interval.

    ::

        with ControlledLoad(plan) as load:
            for interval in load.intervals():
                if interval.targets["a"].p99_us > slo_us:
                    break
                load.set_rate(interval.rate_per_s * 1.1)
        result = load.result

    A plan with ``duration_s=0`` runs until :meth:`stop`. ``folder``: where its temporary
    folder goes (a folder its caller's janitor removes, default the system's). With
    ``own_session`` the engine is out of the caller's process group, so that Ctrl-C in the
    terminal reaches only the caller, which stops the engine when it is ready to (Kraken
    puts the weights back first); it still dies with the caller.
    """

    def __init__(
        self,
        plan: LoadPlan,
        *,
        engine: Path | None = None,
        folder: Path | None = None,
        own_session: bool = False,
    ) -> None:
        self._plan = plan
        self._engine = engine
        self._folder = folder
        self._own_session = own_session
        self._proc: subprocess.Popen[str] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._summary_path: Path | None = None
        self._stderr: IO[str] | None = None
        self._lines: queue.Queue[object] = queue.Queue()
        self._reader: threading.Thread | None = None
        self._result: LoadResult | None = None

    def __enter__(self) -> ControlledLoad:
        binary = self._engine or find_engine()
        self._tmp = tempfile.TemporaryDirectory(prefix="hairline-control-", dir=self._folder)
        self._summary_path = self._plan.summary_path or Path(self._tmp.name) / "summary.json"
        args = with_summary(self._plan, self._summary_path).to_args(control=True)
        self._stderr = tempfile.TemporaryFile(mode="w+")
        try:
            self._proc = subprocess.Popen(
                [str(binary), *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                text=True,
                bufsize=1,
                # With duration 0 it runs until told to stop: it must die with its parent.
                preexec_fn=child_setup(),
                start_new_session=self._own_session,
            )
        except OSError as err:
            self._close()
            raise EngineError(f"cannot run {binary}: {err}") from err
        self._reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._reader.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Stopped whole even if a second Ctrl-C comes meanwhile (it is remembered).
        with interrupts.deferred():
            if exc_type is not None:
                self._kill()
                self._close()
                return
            if self._result is None:
                self.stop()

    def _read_stdout(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        for line in proc.stdout:
            line = line.strip()
            if line:
                self._lines.put(line)
        self._lines.put(_DONE)

    def set_rate(self, rate_per_s: float) -> None:
        """Changes the rate at once (a new schedule segment starts now)."""
        if not (math.isfinite(rate_per_s) and rate_per_s >= 0):
            raise ConfigError(f"rate_per_s: expected a number >= 0, got {rate_per_s}")
        self._send({"rate_per_s": rate_per_s})

    def intervals(self, *, timeout_s: float | None = None) -> Iterator[IntervalStats]:
        """Each interval as the engine reports it, until the run ends."""
        while True:
            try:
                item = self._lines.get(timeout=timeout_s)
            except queue.Empty:
                raise EngineError(
                    f"no interval report from the engine within {timeout_s} s"
                ) from None
            if item is _DONE:
                self._lines.put(_DONE)  # later calls end at once too
                return
            assert isinstance(item, str)
            data = json.loads(item)
            if data.get("type") == "interval":
                yield IntervalStats.from_json(data)

    def stop(self, *, timeout_s: float = 30.0) -> LoadResult:
        """Ends the run (in-flight requests get up to the request timeout) and reads it."""
        proc = self._proc
        if proc is None:
            raise EngineError("ControlledLoad.stop() called outside its `with` block")
        if proc.poll() is None:
            try:
                self._send({"stop": True})
                assert proc.stdin is not None
                proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass  # the engine already ended; its exit status tells how
        try:
            returncode = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._kill()
            self._close()
            raise EngineError(f"hairline-engine did not stop within {timeout_s} s") from None
        if self._reader is not None:
            self._reader.join(timeout=5)
        stderr = self._stderr_text()
        try:
            assert self._summary_path is not None
            if returncode not in (0, EXIT_INVALID) or not self._summary_path.exists():
                raise engine_failure(returncode, stderr)
            self._result = read_summary(self._summary_path, stderr, self._plan.requests_path)
            return self._result
        finally:
            self._close()

    @property
    def pid(self) -> int:
        """The engine's process id (to watch or signal it)."""
        if self._proc is None:
            raise EngineError("ControlledLoad.pid read outside its `with` block")
        return self._proc.pid

    @property
    def result(self) -> LoadResult:
        if self._result is None:
            raise EngineError("the run has not been stopped yet; call stop() first")
        return self._result

    def _send(self, command: Mapping[str, object]) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdin.closed:
            raise EngineError("the controlled run is not running")
        try:
            proc.stdin.write(json.dumps(command) + "\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError) as err:
            raise EngineError(
                f"the engine stopped reading commands: {err}\n{self._stderr_text()}"
            ) from err

    def _stderr_text(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read()

    def _kill(self) -> None:
        if self._proc is not None:
            stop_process(self._proc, close_stdout=False)  # _close closes the pipes

    def _close(self) -> None:
        if self._proc is not None:
            for stream in (self._proc.stdin, self._proc.stdout):
                if stream is not None and not stream.closed:
                    with contextlib.suppress(OSError):
                        stream.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
