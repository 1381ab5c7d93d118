"""kit.ports: a child's port is never one the kernel may hand an outgoing connection."""

from __future__ import annotations

import socket
from pathlib import Path

from hairline.kit.ports import ephemeral_range, free_port


def test_ports_lie_outside_the_ephemeral_range_and_rays_worker_ports_and_bind() -> None:
    low, high = ephemeral_range()
    for _ in range(200):
        port = free_port()
        # Ray's nodes hand 10002-19999 to their workers; a head on 16840 refused to start.
        assert not low <= port <= high and port >= 20_000
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_range_that_leaves_nothing_outside_it_gets_the_kernels_choice() -> None:
    port = free_port(ephemeral=(1_024, 65_535))
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_an_unreadable_range_file_means_linuxs_default(tmp_path: Path) -> None:
    assert ephemeral_range(tmp_path / "missing") == (32_768, 60_999)
    garbled = tmp_path / "range"
    garbled.write_text("not numbers\n")
    assert ephemeral_range(garbled) == (32_768, 60_999)
    garbled.write_text("20000\t30000\n")
    assert ephemeral_range(garbled) == (20_000, 30_000)
