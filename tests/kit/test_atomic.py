"""Files written whole or not at all, with the permissions a plain open gives."""

from __future__ import annotations

import os
import stat
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
