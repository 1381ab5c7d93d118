"""Files written whole or not at all, with the permissions a plain open gives."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from hairline.kit.atomic import atomic_path, umask, write_text_atomic


def test_a_file_is_written_whole_with_the_umasks_permissions(tmp_path: Path) -> None:
    path = write_text_atomic(tmp_path / "deep" / "report.md", "# one\n")

    assert path.read_text() == "# one\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask()
    assert sorted(p.name for p in path.parent.iterdir()) == ["report.md"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text("old\n")

    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("the disk filled")

    assert path.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["plan.json"]


def test_a_device_is_written_in_place_not_replaced_by_a_file() -> None:
    """`--json /dev/null` as root once replaced /dev/null with a plain file (renamed over
    it); a device, FIFO or socket is written to, never renamed over."""
    devnull = Path(os.devnull)
    before = devnull.stat()
    write_text_atomic(devnull, "nothing\n")
    after = devnull.stat()
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (
        before.st_ino, before.st_rdev
    )  # fmt: skip
    assert not list(devnull.parent.glob(".null.*.tmp"))


def test_a_fifo_gets_the_text_and_stays_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    write_text_atomic(fifo, "through the pipe\n")
    reader.join(timeout=10)
    assert got == ["through the pipe\n"] and stat.S_ISFIFO(fifo.stat().st_mode)


def test_a_symlink_is_kept_and_the_file_it_names_replaced(tmp_path: Path) -> None:
    real = tmp_path / "reports" / "report.json"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "latest.json"
    link.symlink_to(real)
    write_text_atomic(link, "new")
    assert link.is_symlink() and link.resolve() == real and real.read_text() == "new"
