"""The watchdog: puts a load balancer's original weights back if the Kraken controller dies
without doing so (Kraken 4.4: a test must never leave traffic shifted).

It runs as ``python -m hairline.kraken.watchdog`` in a session of its own, so that neither
Ctrl-C in the controller's terminal nor the controller's SIGKILL reaches it. The controller
holds the write end of its stdin and writes one line per sample: ``beat``, or ``done`` once
it has restored the weights itself. The watchdog restores the weights it was given when its
stdin closes without ``done`` (the controller died) or when no line came for ``--silence-s``
(the controller hangs), then exits; the controller finds its pipe broken at its next beat and
aborts. A load balancer that does not answer is tried again for ``RESTORE_TRIES_S``; one
that is gone (nothing listens on HAProxy's socket, nginx's master is not running: a local
fleet dies with its controller) for ``GONE_GRACE_S`` only, since there are no weights left
to restore. Everything it does is logged, one line per event.

:class:`Watchdog` is the controller's side.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

from hairline.errors import LoadBalancerError, LoadBalancerGone
from hairline.kit import interrupts
from hairline.lb.balancer import LbSpec, LoadBalancer
from hairline.lb.factory import open_balancer

__all__ = ["GONE_GRACE_S", "RESTORE_TRIES_S", "Watchdog", "main"]

#: How long the watchdog keeps trying to restore the weights on an LB that does not answer.
RESTORE_TRIES_S = 30.0
#: How long a load balancer may be gone (a restart rebinding its socket) before the watchdog
#: leaves: it retried a dead fleet's socket for 30 s (issue 31).
GONE_GRACE_S = 2.0
_READY = "ready"


class Watchdog:
    """The controller's handle on a watchdog process::

    with Watchdog(lb_spec, original, silence_s=6.0, log_path=log) as dog:
        dog.beat()      # at every sample; raises LoadBalancerError if it is gone
        ...
        dog.done()      # after the controller restored the weights itself
    """

    def __init__(
        self,
        lb: LbSpec,
        original: Mapping[str, int],
        *,
        silence_s: float,
        log_path: Path | None = None,
        start_timeout_s: float = 10.0,
    ) -> None:
        self._command = [
            sys.executable, "-m", "hairline.kraken.watchdog",
            "--lb", lb.to_json(),
            "--weights", json.dumps(dict(original)), "--silence-s", str(silence_s),
            *(["--log", str(log_path)] if log_path is not None else []),
        ]  # fmt: skip
        self._start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen[str] | None = None
        self._finished = False

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def __enter__(self) -> Watchdog:
        # Its own session: not in the controller's process group (Ctrl-C) and no parent-
        # death signal (procs.child_setup's), since outliving the controller is its job.
        self._proc = subprocess.Popen(
            self._command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        assert self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], self._start_timeout_s)
        line = self._proc.stdout.readline().strip() if ready else ""
        if line != _READY:
            self._kill()
            raise LoadBalancerError(
                f"the weight watchdog did not start (said {line!r})",
                hint="run `python -m hairline.kraken.watchdog --help` to check it runs here",
            )
        return self

    def beat(self) -> None:
        self._send("beat")

    def done(self) -> None:
        """The weights are restored: the watchdog may go without touching them."""
        self._send("done")
        self._finished = True
        assert self._proc is not None
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._kill()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Without done(), closing the pipe is the signal to restore; wait for it so that the
        # caller's "restored" is true when this returns.
        if self._proc is None:
            return
        with interrupts.deferred():
            with contextlib.suppress(OSError):
                if self._proc.stdin is not None:
                    self._proc.stdin.close()
            try:
                self._proc.wait(timeout=RESTORE_TRIES_S + 5)
            except subprocess.TimeoutExpired:
                self._kill()
            if self._proc.stdout is not None:
                self._proc.stdout.close()

    def _send(self, word: str) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None or proc.poll() is not None:
            raise LoadBalancerError(
                "the weight watchdog is gone (it restored the original weights)",
                hint="it acts after its heartbeats stop; see its log for why",
            )
        try:
            proc.stdin.write(word + "\n")
            proc.stdin.flush()
        except OSError as err:
            raise LoadBalancerError(
                f"the weight watchdog is gone: {err}",
                hint="it acts after its heartbeats stop; see its log for why",
            ) from err

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()


class _Stopped(Exception):
    pass


def _stop(signum: int, frame: object) -> None:
    raise _Stopped


def _log(out: IO[str], message: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    out.write(f"{stamp} watchdog[{os.getpid()}]: {message}\n")
    out.flush()


def _restore(lb: LoadBalancer, original: Mapping[str, int], out: IO[str]) -> bool:
    deadline = time.monotonic() + RESTORE_TRIES_S
    gone_since: float | None = None
    while True:
        try:
            lb.set_weights(original)
        except LoadBalancerGone as err:
            now = time.monotonic()
            gone_since = now if gone_since is None else gone_since
            if now - gone_since >= GONE_GRACE_S:
                _log(out, f"{lb.describe()} is gone ({err.message}): no weights to restore")
                return False
            time.sleep(0.2)
            continue
        except LoadBalancerError as err:
            gone_since = None
            if time.monotonic() > deadline:
                _log(out, f"gave up restoring the weights on {lb.describe()}: {err.message}")
                return False
            time.sleep(0.5)
            continue
        _log(out, f"restored the original weights on {lb.describe()}: {dict(original)}")
        return True


def _watch(stdin: IO[str], silence_s: float, out: IO[str]) -> str:
    """Read heartbeats until ``done`` (returns "done"), EOF or silence (returns why)."""
    fd = stdin.fileno()
    buffered = b""
    while True:
        ready, _, _ = select.select([fd], [], [], silence_s)
        if not ready:
            return f"no heartbeat for {silence_s:g} s"
        chunk = os.read(fd, 4096)
        if not chunk:
            return "the controller's pipe closed without 'done'"
        buffered += chunk
        *lines, buffered = buffered.split(b"\n")
        if any(line.strip() == b"done" for line in lines):
            return "done"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hairline.kraken.watchdog")
    parser.add_argument(
        "--lb", required=True, help="the load balancer, as JSON (hairline.lb.balancer.LbSpec)"
    )
    parser.add_argument("--weights", required=True, help="the original weights, as JSON")
    parser.add_argument("--silence-s", required=True, type=float)
    parser.add_argument("--log", type=Path, help="append the log here (default: stderr)")
    args = parser.parse_args(argv)
    original = {str(k): int(v) for k, v in json.loads(args.weights).items()}
    lb = open_balancer(LbSpec.from_json(args.lb))
    out: IO[str] = open(args.log, "a") if args.log else sys.stderr  # noqa: SIM115
    # A SIGTERM to the watchdog is someone ending the test: restore, as on a dead controller.
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _log(out, f"watching {lb.describe()}; original weights {original}")
    print(_READY, flush=True)
    try:
        why = _watch(sys.stdin, args.silence_s, out)
    except _Stopped:
        why = "SIGTERM"
    if why == "done":
        _log(out, "the controller restored the weights itself; leaving")
        return 0
    _log(out, f"{why}: restoring")
    return 0 if _restore(lb, original, out) else 1


if __name__ == "__main__":
    sys.exit(main())
