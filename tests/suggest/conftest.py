"""A git repository a test writes commits into."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

Commit = Callable[[Mapping[str, str | None]], str]


def git(repo: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com")  # fmt: skip
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          env=env, check=True)  # fmt: skip
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    return path


@pytest.fixture
def commit(repo: Path) -> Commit:
    """Write files (None deletes one; "->new/path" moves it) and commit; the commit's id."""

    def make(files: Mapping[str, str | None]) -> str:
        for name, text in files.items():
            path = repo / name
            if text is None:
                git(repo, "rm", "-q", name)
            elif text.startswith("->"):
                (repo / text[2:]).parent.mkdir(parents=True, exist_ok=True)
                git(repo, "mv", name, text[2:])
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
                git(repo, "add", name)
        git(repo, "commit", "-q", "--allow-empty", "-m", "c")
        return git(repo, "rev-parse", "HEAD")

    return make
