"""The egress proxy between a service under test and one downstream: ``hairline-engine
egress`` as a child process that dies with its parent.

With ``http=True`` it forwards the requests ``forward`` names (methods, or ``"METHOD
/path"``) and answers every other one itself, so that a test never writes to the
downstream; without it, it relays TCP. Its counters (connections, upstream errors, and per
``METHOD /path`` the requests forwarded and dropped) are read from the stats file it
rewrites every 0.5 s. docs/safety.md ("Writes dropped") says what this covers and what not.

::

    spec = EgressSpec(listen="127.0.0.1:0", upstream="127.0.0.1:9000", http=True)
    with EgressProxy(spec, stats_path=tmp / "egress.json") as proxy:
        ...  # the service calls proxy.address
    print(proxy.stop().dropped)
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO

from hairline.engine import find_engine
from hairline.errors import ArmFailed
from hairline.kit.procs import child_setup

__all__ = ["EgressProxy", "EgressSpec", "EgressStats"]

_STDERR_TAIL_CHARS = 2000
_STOP_WAIT_S = 5.0


@dataclass(frozen=True)
class EgressSpec:
    """One proxy: where it listens (inside ``netns`` when given), where it connects (from
    the host's namespace), and under ``http`` what it forwards and answers."""

    listen: str
    upstream: str
    netns: Path | None = None
    http: bool = False
    forward: tuple[str, ...] = ("GET", "HEAD")
    drop_status: int = 200
    drop_body: str = "{}"
    drop_content_type: str = "application/json"

    def to_args(self, stats_path: Path) -> list[str]:
        """The engine's flags for this proxy."""
        args = ["egress", "--listen", self.listen, "--upstream", self.upstream]
        args += ["--stats", str(stats_path)]
        if self.netns is not None:
            args += ["--netns", str(self.netns)]
        if self.http:
            args.append("--http")
            # The engine's default with no rule is GET and HEAD; none at all is explicit.
            if not self.forward:
                args.append("--forward-none")
            for rule in self.forward:
                args += ["--forward", rule]
            args += ["--drop-status", str(self.drop_status), "--drop-body", self.drop_body]
            args += ["--drop-content-type", self.drop_content_type]
        return args


@dataclass(frozen=True)
class EgressStats:
    """The proxy's counters; ``forwarded`` and ``dropped`` by ``"METHOD /path"`` (no
    query), empty without ``http``."""

    connections: int = 0
    upstream_errors: int = 0
    forwarded: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, object]) -> EgressStats:
        def counts(key: str) -> dict[str, int]:
            value = data.get(key) or {}
            assert isinstance(value, dict)
            return {str(k): int(v) for k, v in value.items()}

        connections = data.get("connections", 0)
        upstream_errors = data.get("upstream_errors", 0)
        assert isinstance(connections, int) and isinstance(upstream_errors, int)
        return cls(connections, upstream_errors, counts("forwarded"), counts("dropped"))


class EgressProxy:
    """``hairline-engine egress`` for one downstream, started and stopped on every path."""

    def __init__(self, spec: EgressSpec, *, stats_path: Path, engine: Path | None = None) -> None:
        self.spec = spec
        self.stats_path = stats_path
        self._engine = engine
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._final: EgressStats | None = None
        self.address: str | None = None
        """``host:port`` it listens on (the port chosen when ``listen`` asked for 0)."""

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self, *, timeout_s: float = 10.0) -> EgressProxy:
        """Starts the proxy and waits for its ``ready`` line; :class:`ArmFailed` with the
        engine's stderr when it exits or stays silent for ``timeout_s``."""
        if self._proc is not None:
            return self
        binary = self._engine or find_engine()
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop())
        try:
            self._proc = subprocess.Popen(
                [str(binary), *self.spec.to_args(self.stats_path)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                # It would otherwise keep answering for a processor that was SIGKILLed. The
                # signal comes when the starting *thread* ends: start it from one that lives
                # as long as the arm.
                preexec_fn=child_setup(),
            )
        except OSError as err:
            self._close_stderr()
            raise ArmFailed(
                f"cannot run the egress proxy {binary}: {err}",
                hint="set HAIRLINE_ENGINE to the hairline-engine binary, or reinstall hairline",
            ) from err
        line = self._read_ready(timeout_s)
        if not line.startswith("ready "):
            self._kill()
            tail = self._stderr_tail()
            self._close_stderr()
            why = "exited" if line == "" and self._proc.returncode is not None else "timed out"
            self._proc = None
            raise ArmFailed(
                f"the egress proxy {self.spec.listen} -> {self.spec.upstream} did not start "
                f"({why}): {tail or line or 'no output'}",
                hint="check [[service.isolation.http]] address and forward in the experiment "
                "file; the engine's message above names the flag",
            )
        self.address = line.removeprefix("ready ").strip()
        return self

    def _read_ready(self, timeout_s: float) -> str:
        """The first stdout line, or what arrived of it by the deadline or the exit."""
        assert self._proc is not None and self._proc.stdout is not None
        stdout = self._proc.stdout
        deadline = time.monotonic() + timeout_s
        got = b""
        with selectors.DefaultSelector() as selector:
            selector.register(stdout, selectors.EVENT_READ)
            while b"\n" not in got:
                left_s = deadline - time.monotonic()
                if left_s <= 0 or not selector.select(left_s):
                    break
                chunk = os.read(stdout.fileno(), 4096)
                if not chunk:
                    self._proc.wait(timeout=_STOP_WAIT_S)
                    break
                got += chunk
        stdout.close()
        return got.decode(errors="replace").partition("\n")[0]

    def stats(self) -> EgressStats:
        """The latest counters (zeros before the first write)."""
        if self._final is not None:
            return self._final
        try:
            text = self.stats_path.read_text()
        except FileNotFoundError:
            return EgressStats()
        return EgressStats.from_json(json.loads(text))

    def stop(self) -> EgressStats:
        """SIGTERM, wait for the final stats; idempotent."""
        if self._final is not None:
            return self._final
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=_STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                self._kill()
        self._close_stderr()
        self._final = self.stats()
        return self._final

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        text = self._stderr.read().decode(errors="replace").strip()
        return text[-_STDERR_TAIL_CHARS:]

    def _close_stderr(self) -> None:
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __enter__(self) -> EgressProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
