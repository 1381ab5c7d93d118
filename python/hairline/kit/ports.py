"""A TCP port for a child process to listen on, that the kernel hands nobody else meanwhile.

Binding port 0 and closing the socket yields a port from the kernel's ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``, 32768-60999 on this project's VMs): the range
every outgoing connection on the machine takes its local port from. Between that close and
the child's own bind, any ``connect()`` may be given the same port, and the child then
fails with "address in use". That failed a full suite run on 2026-11-28 (a routing fleet's
instance, while the engine opened connections to the other arm). The kernel never hands out
a port outside the range, so one is chosen at random there and checked to bind now. Two
choosers can still pick the same port at once; at random among 17,000 that is rare, and the
child says clearly that its port is taken.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["free_port"]

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# Below this: well-known and registered services, root-only ports below 1024, and Ray's
# default worker ports (10002-19999), which every Ray node hands its workers to bind. A head
# started on 16840 by the suite failed at once there ("worker_ports is trying to use a port
# number 16840", CI, 2026-11-28), and an arm's port in that range can be taken by a worker.
_FLOOR = 20_000
_TOP = 65_535
_ATTEMPTS = 200
_RANDOM = random.SystemRandom()


def ephemeral_range(path: Path = _RANGE_FILE) -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux's default when it cannot be read)."""
    try:
        low, high = (int(word) for word in path.read_text().split())
    except (OSError, ValueError):
        return 32_768, 60_999
    return low, high


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1", *, ephemeral: tuple[int, int] | None = None) -> int:
    """A port on ``host`` that binds now and lies outside the ephemeral range (any free
    port if the range leaves none outside it)."""
    low, high = ephemeral or ephemeral_range()
    below, above = max(0, low - _FLOOR), max(0, _TOP - high)  # ports outside, each side
    for _ in range(_ATTEMPTS if below + above else 0):
        i = _RANDOM.randrange(below + above)
        port = _FLOOR + i if i < below else high + 1 + (i - below)
        if _bindable(host, port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
