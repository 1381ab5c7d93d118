#!/usr/bin/env python3
"""How fast `hairline agent start --foreground` leaves and notices a dead node.

    python bench/agent/foreground.py              # 3 rounds
    python bench/agent/foreground.py --rounds 5

Starts a Ray head on 127.0.0.1 (`agent start --head`, token auth on) and, per round, a
foreground agent on 127.0.0.6 with its host registered in a SQLite database; measures
(1) start to "staying in the foreground", (2) SIGTERM to exit 0, (3) `kill -9` of the
node's raylet to exit 2; and checks that no process of the node's session is left.
Everything it started is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hairline.kit.procs import session_members

HAIRLINE = [sys.executable, "-c", "from hairline.cli import main; main()"]


def session(sid: int) -> list[tuple[int, str]]:
    """(pid, name) of the live processes of session ``sid``."""
    return session_members(sid)


class Lab:
    def __init__(self, root: Path) -> None:
        self.root = root
        token = root / "token"
        token.write_text(os.urandom(32).hex())
        token.chmod(0o600)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token),
                    "HAIRLINE_DB": f"sqlite:///{root}/lab.db"}  # fmt: skip
        self.home = root / "agents"

    def hairline(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*HAIRLINE, *args], capture_output=True, text=True, env=self.env)

    def start_head(self) -> None:
        done = self.hairline(
            "agent", "start", "--head", "--port", str(self.port), "--node-ip", "127.0.0.1",
            "--housekeeping-cpus", "0", "--home", str(self.home),
            "--ray-temp-dir", str(self.root / "head"),
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"the head did not start:\n{done.stdout}{done.stderr}")

    def foreground(self) -> tuple[subprocess.Popen[str], int, float]:
        """A foreground agent once it stays; its process, its node's session, seconds."""
        started = time.monotonic()
        proc = subprocess.Popen(
            [*HAIRLINE, "agent", "start", "--foreground", "--address", f"127.0.0.1:{self.port}",
             "--name", "bench", "--node-ip", "127.0.0.6", "--cpus", "0",
             "--housekeeping-cpus", "1", "--home", str(self.home),
             "--ray-temp-dir", str(self.root / "bench")],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env,
        )  # fmt: skip
        assert proc.stdout is not None
        for line in proc.stdout:
            if "staying in the foreground" in line:
                break
        else:
            raise SystemExit(f"the agent ended: {proc.wait()}")
        state = json.loads((self.home / "agents" / "bench.json").read_text())
        return proc, int(state["pid"]), time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    lab = Lab(Path(tempfile.mkdtemp(prefix="hlbench-", dir="/tmp")))
    try:
        lab.start_head()
        for n in range(rounds):
            proc, sid, up_s = lab.foreground()
            time.sleep(2)
            sent = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(60)
            print(f"round {n + 1}: up in {up_s:.1f} s; SIGTERM -> exit {code} in "
                  f"{time.monotonic() - sent:.2f} s; processes left: {session(sid)}")  # fmt: skip
            proc, sid, up_s = lab.foreground()
            time.sleep(2)
            raylet = next(pid for pid, name in session(sid) if name == "raylet")
            sent = time.monotonic()
            os.kill(raylet, signal.SIGKILL)
            code = proc.wait(60)
            print(f"round {n + 1}: up in {up_s:.1f} s; raylet SIGKILL -> exit {code} in "
                  f"{time.monotonic() - sent:.2f} s; processes left: {session(sid)}")  # fmt: skip
    finally:
        lab.hairline("agent", "stop", "--head", "--home", str(lab.home))
        subprocess.run(["rm", "-rf", str(lab.root)], check=False)


if __name__ == "__main__":
    main()
