"""A real process as a collector sees an arm, for the collectors' tests."""

from __future__ import annotations

from hairline.collect.procfs import anon_memory_bytes, process_tree


class Child:
    """A running process and its descendants from procfs (no cgroup, so no peak)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def pids(self) -> list[int]:
        return process_tree(self.pid)

    def anon_memory_bytes(self) -> int:
        return anon_memory_bytes(self.pids())

    def peak_memory_bytes(self) -> int | None:
        return None
