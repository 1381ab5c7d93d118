"""Stacks of an arm's processes from ``perf record -e cpu-clock``, as a :class:`Profile`.

The software clock event works where a VM has no hardware counters. perf samples every task
on the arm's CPUs (``-a -C``) and the samples are kept for the arm's processes only: perf
6.1 attached to processes (``-p``) with DWARF unwinding records no sample at all on this
project's VMs, while system-wide recording does, and an arm pinned to its own CPUs shares
them with nothing of the experiment but what the kernel does for it. The processes are the
arm's cgroup's at the start and at the end of the window; one that starts and exits between
the two is missed (docs/profiling.md).

:func:`record_args` and :func:`parse_script` are pure; :class:`PerfSampler` runs perf;
:class:`ArmPerf` is one arm's window (perf and the arm's processes at both ends), run where
the arm runs: by the lab for a local arm, by the node's agent for a Ray arm.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from hairline.kit.procs import child_setup
from hairline.profile.formats import Frame, Profile

__all__ = [
    "ArmPerf",
    "PerfSampler",
    "Sampled",
    "parse_script",
    "perf_binary",
    "record_args",
    "script_args",
]

# A frame of `perf script -F comm,pid,ip,sym,dso`: "  55d0c3 name (dso)"; the name may
# hold spaces and parentheses (C++), the dso is the last parenthesised group.
_FRAME = re.compile(r"^\s*([0-9a-fA-F]+)\s+(.*?)\s*\(([^()]*)\)\s*$")
# A whole sample on one line (no call graph): "  comm  pid  55d0c3 name (dso)".
_ONE_LINE = re.compile(r"^\s*\S.*?\s(\d+)\s+[0-9a-fA-F]+\s+(.*?)\s*\(([^()]*)\)\s*$")
# Rust's legacy mangling ends each path in a hash perf leaves in the demangled name.
_RUST_HASH = re.compile(r"::h[0-9a-f]{16}$")
_OFFSET = re.compile(r"\+0x[0-9a-f]+$")
_STOP_TIMEOUT_S = 30.0
# The process name as the profile's root frame (Profile's "endpoint" slot).
ROOT = "(arm)"


def perf_binary() -> str | None:
    """``$HAIRLINE_PERF`` when set (a perf of the running kernel's version at a path of its
    own), else perf on PATH (Debian's linux-perf installs /usr/bin/perf); None when it is
    not an executable."""
    configured = os.environ.get("HAIRLINE_PERF")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    return shutil.which("perf")


def record_args(
    perf: str,
    output: Path,
    *,
    frequency_hz: int,
    call_graph: str,
    stack_bytes: int,
    cpus: Collection[int] | None,
) -> list[str]:
    """The ``perf record`` command line for one arm (pure)."""
    args = [perf, "record", "-e", "cpu-clock", "-F", str(frequency_hz), "-a", "-q"]
    if cpus:
        args += ["-C", ",".join(str(c) for c in sorted(cpus))]
    if call_graph == "dwarf":
        args += ["--call-graph", f"dwarf,{stack_bytes}"]
    elif call_graph == "fp":
        args += ["--call-graph", "fp"]
    return [*args, "-o", str(output)]


def script_args(perf: str, data: Path) -> list[str]:
    """The ``perf script`` command line that prints what :func:`parse_script` reads."""
    return [perf, "script", "-i", str(data), "-F", "comm,pid,ip,sym,dso"]


def _name(symbol: str, dso: str) -> str:
    symbol = _OFFSET.sub("", _RUST_HASH.sub("", symbol.strip()))
    if not symbol or symbol == "[unknown]":
        return f"[unknown in {Path(dso).name or dso or '?'}]"
    return symbol


@dataclass(frozen=True)
class Sampled:
    """What one window of sampling gave: a profile of the arm's samples (None with the
    reason why), how many samples of other processes on its CPUs were left out, and the
    host whose perf sampled ("" for this machine; a Ray arm's is its node's). Plain data:
    a Ray node sends it back to the processor as it is."""

    profile: Profile | None
    samples: int
    others: int
    reason: str = ""
    host: str = ""


def parse_script(text: str, pids: Collection[int], *, source: str = "perf") -> Sampled:
    """``perf script -F comm,pid,ip,sym,dso`` output -> the samples of ``pids`` as folded
    stacks (root first, each sample counting 1), the rest counted in ``others``."""
    stacks: dict[tuple[str, tuple[Frame, ...]], float] = {}
    kept = others = 0
    frames: list[Frame] = []
    pid: int | None = None

    def flush() -> None:
        nonlocal kept, others
        if pid is None:
            return
        if pid in pids and frames:
            key = (ROOT, tuple(reversed(frames)))
            stacks[key] = stacks.get(key, 0.0) + 1.0
            kept += 1
        else:
            others += 1

    for line in text.splitlines():
        if not line.strip():
            continue
        # A call chain's frames are indented by a tab. Anything else starts a sample: its
        # "comm pid" alone (call chains follow), or without call graphs (call_graph =
        # "none") the whole sample on one line, the command right-aligned with spaces.
        if line[0] != "\t":
            flush()
            frames = []
            inline = _ONE_LINE.match(line)
            if inline is not None:
                pid = int(inline.group(1))
                frames.append(Frame(_name(inline.group(2), inline.group(3))))
                continue
            last = line.split()[-1]
            pid = int(last) if last.isdigit() else None
            continue
        match = _FRAME.match(line)
        if match is not None:
            frames.append(Frame(_name(match.group(2), match.group(3))))
    flush()
    if not stacks:
        why = (
            f"perf recorded {others} samples on the arm's CPUs, none of the arm's processes"
            if others
            else "perf recorded no sample"
        )
        return Sampled(None, 0, others, why)
    return Sampled(Profile(stacks, unit="samples", sources=(source,)), kept, others)


class PerfSampler:
    """``perf record`` over one measurement window: :meth:`start` before the load,
    :meth:`stop` after it. Never raises for perf's own failures: the batch runs on and
    :class:`Sampled` says why there is no profile."""

    def __init__(
        self,
        *,
        frequency_hz: int,
        call_graph: str,
        stack_bytes: int,
        cpus: Collection[int] | None,
        workdir: Path,
        name: str,
    ) -> None:
        self._options = (frequency_hz, call_graph, stack_bytes)
        self._cpus = cpus
        self._data = workdir / f"{name}.perf.data"
        self._log = workdir / f"{name}.perf.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._failed = ""

    def start(self) -> None:
        perf = perf_binary()
        if perf is None:
            configured = os.environ.get("HAIRLINE_PERF")
            self._failed = (
                f"HAIRLINE_PERF={configured} is not an executable (point it at perf, or "
                "unset it to use perf on PATH)"
                if configured
                else "perf is not installed (apt-get install linux-perf, or the "
                "distribution's perf package)"
            )
            return
        frequency_hz, call_graph, stack_bytes = self._options
        args = record_args(perf, self._data, frequency_hz=frequency_hz, call_graph=call_graph,
                           stack_bytes=stack_bytes, cpus=self._cpus)  # fmt: skip
        # perf runs on the arm's own CPUs: each arm pays for its own sampling (the copy of
        # each sample's stack, the writing), where an unpinned perf landed on whichever CPU,
        # the load generator's included (it fell 8% behind beside an arm sampled at 4,999
        # Hz). It dies with this process (PR_SET_PDEATHSIG): no perf outlives a lab.
        setup = child_setup(sorted(self._cpus) if self._cpus else None)

        def preexec() -> None:
            # SIGINT ends the recording. A Ray worker (a node's agent starts perf) runs with
            # signals blocked, and a child inherits its parent's mask: that perf never saw
            # the SIGINT and was killed after 30 s, its samples lost.
            signal.pthread_sigmask(signal.SIG_SETMASK, set())
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            setup()

        with self._log.open("wb") as log:
            self._proc = subprocess.Popen(
                args, stdout=log, stderr=log, start_new_session=True, preexec_fn=preexec,
            )  # fmt: skip

    def interrupt(self) -> None:
        """Ask perf to stop (SIGINT: it writes its data file and exits 0); every arm's perf
        is interrupted before any is read, so the windows close together."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)

    def kill(self) -> None:
        """Stop perf without reading anything (a batch that failed) and remove its data."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        self._data.unlink(missing_ok=True)

    def stop(self, pids: Collection[int]) -> Sampled:
        """Stop recording (if :meth:`interrupt` has not) and read the samples of ``pids``."""
        if self._failed:
            return Sampled(None, 0, 0, self._failed)
        proc = self._proc
        if proc is None:
            return Sampled(None, 0, 0, "perf was not started")
        self.interrupt()
        try:
            proc.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            return Sampled(None, 0, 0, f"perf did not stop within {_STOP_TIMEOUT_S:.0f} s")
        if proc.returncode not in (0, -signal.SIGINT, 128 + signal.SIGINT):
            self._data.unlink(missing_ok=True)
            return Sampled(None, 0, 0, _perf_failure(self._log))
        perf = perf_binary() or "perf"
        try:
            with tempfile.TemporaryFile() as out:
                done = subprocess.run(script_args(perf, self._data), stdout=out,
                                      stderr=subprocess.PIPE, timeout=300, check=False)  # fmt: skip
                out.seek(0)
                text = out.read().decode("utf-8", "replace")
        except subprocess.TimeoutExpired:
            return Sampled(None, 0, 0, "perf script took over 300 s to read the samples")
        finally:
            self._data.unlink(missing_ok=True)
        if done.returncode != 0:
            return Sampled(None, 0, 0, "perf script failed: " + _last_line(done.stderr))
        return parse_script(text, set(pids))


def _last_line(data: bytes) -> str:
    lines = [x for x in data.decode("utf-8", "replace").splitlines() if x.strip()]
    return lines[-1].strip() if lines else "(no message)"


def _perf_failure(log: Path) -> str:
    text = log.read_bytes() if log.exists() else b""
    message = _last_line(text)
    if "perf_event_paranoid" in text.decode("utf-8", "replace"):
        return (
            f"perf may not sample here ({message}); run the lab as root or set "
            "kernel.perf_event_paranoid to -1 (sysctl)"
        )
    return f"perf record failed: {message}"


class ArmPerf:
    """One arm's sampling over one measurement window: its perf, and the arm's processes
    read at both ends (the samples kept are theirs). The one implementation of an arm's
    window, run where the arm's processes are: by the lab for a local arm
    (lab/sampling.py), by the agent on the node for a Ray arm (arms/host_agent.py).

    :meth:`start` before the load; :meth:`interrupt` just after it (every arm's before any
    is read, so the windows close together); :meth:`stop` reads the samples; :meth:`kill`
    on every other way out. None of them raises for perf's own failures."""

    def __init__(self, perf: PerfSampler, pids: Callable[[], Collection[int]]) -> None:
        self._perf = perf
        self._read_pids = pids
        self._pids: set[int] = set()
        self._interrupted = False

    def start(self) -> None:
        self._pids = set(self._read_pids())
        self._perf.start()

    def interrupt(self) -> None:
        if not self._interrupted:
            self._interrupted = True
            self._pids |= set(self._read_pids())
            self._perf.interrupt()

    def stop(self) -> Sampled:
        self.interrupt()
        return self._perf.stop(self._pids)

    def kill(self) -> None:
        self._perf.kill()
