"""The lines a diff changes, per file, on both sides: ``git diff -M -U0 base head`` parsed once.

Parsing (:func:`parse_diff`) is pure; :func:`git_diff` and :func:`file_at` are the only
calls to git. ``-M`` makes a moved file one change with its old and new path, so its
functions keep their history; ``-U0`` leaves only changed lines in the hunks, so every
line number in a hunk is one that changed.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from hairline.errors import ConfigError, DataError

__all__ = ["FileChange", "changed_files", "file_at", "git_diff", "parse_diff"]

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass(frozen=True)
class FileChange:
    """One file of a diff: its path on each side (None where it does not exist: added or
    deleted) and the line numbers (1-based) removed from the base and added in the head."""

    old_path: str | None
    new_path: str | None
    removed: tuple[int, ...]
    added: tuple[int, ...]

    @property
    def path(self) -> str:
        """The path a reader knows the file by: the head's, else the base's."""
        return self.new_path or self.old_path or ""

    @property
    def moved(self) -> bool:
        return (
            self.old_path is not None
            and self.new_path is not None
            and (self.old_path != self.new_path)
        )


def _unquote(path: str) -> str:
    # git quotes paths with unusual bytes ("a b" stays, "\303\251" is escaped octal).
    if path.startswith('"') and path.endswith('"'):
        raw = path[1:-1].encode("latin-1").decode("unicode_escape").encode("latin-1")
        return raw.decode("utf-8", errors="replace")
    return path


def _side(text: str, prefix: str) -> str | None:
    path = _unquote(text.strip())
    if path == "/dev/null":
        return None
    return path[len(prefix) :] if path.startswith(prefix) else path


def parse_diff(text: str) -> list[FileChange]:
    """The files of a unified diff (``git diff`` output, any context) with their changed
    lines; files whose content did not change (a pure move, a mode change) have none."""
    changes: list[FileChange] = []
    old: str | None = None
    new: str | None = None
    removed: list[int] = []
    added: list[int] = []
    started = False
    old_line = new_line = 0

    def flush() -> None:
        if started and (old is not None or new is not None):
            changes.append(FileChange(old, new, tuple(removed), tuple(added)))

    for line in text.splitlines():
        if line.startswith("diff --git "):
            flush()
            started, old, new, removed, added = True, None, None, [], []
            old_line = new_line = 0
            # Paths from the header stand until ---/+++ or rename lines say more; a pure
            # rename has no ---/+++ lines at all.
            rest = line[len("diff --git ") :]
            parts = rest.split(" b/", 1) if not rest.startswith('"') else rest.split('" "', 1)
            if len(parts) == 2:
                old = _side(parts[0] + ('"' if rest.startswith('"') else ""), "a/")
                new = _side(('"' if rest.startswith('"') else "b/") + parts[1], "b/")
        elif line.startswith("rename from "):
            old = _unquote(line[len("rename from ") :])
        elif line.startswith("rename to "):
            new = _unquote(line[len("rename to ") :])
        elif line.startswith("new file mode"):
            old = None
        elif line.startswith("deleted file mode"):
            new = None
        elif line.startswith("--- ") and old_line == 0 and not removed and not added:
            old = _side(line[4:], "a/")
        elif line.startswith("+++ ") and old_line == 0 and not removed and not added:
            new = _side(line[4:], "b/")
        elif (match := _HUNK.match(line)) is not None:
            old_line = int(match.group(1))
            new_line = int(match.group(3))
            # A zero-length side starts *after* the line it names.
            if match.group(2) == "0":
                old_line += 1
            if match.group(4) == "0":
                new_line += 1
        elif old_line or new_line:
            if line.startswith("-"):
                removed.append(old_line)
                old_line += 1
            elif line.startswith("+"):
                added.append(new_line)
                new_line += 1
            elif line.startswith(" "):
                old_line += 1
                new_line += 1
    flush()
    return changes


def _env() -> dict[str, str]:
    # Without the caller's GIT_DIR/GIT_INDEX_FILE: a hook or a private index must not
    # change which repository is read.
    return {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = _env()
    try:
        return subprocess.run(
            ["git", "-C", str(repo), *args],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
    except FileNotFoundError as err:
        raise ConfigError("git is not installed", hint="install git to use --repo") from err


def _check_repo(repo: Path) -> None:
    if not repo.is_dir():
        raise ConfigError(f"--repo {repo}: no such folder", hint="pass a git repository's folder")
    done = _git(repo, "rev-parse", "--git-dir")
    if done.returncode != 0:
        raise ConfigError(
            f"--repo {repo} is not a git repository",
            hint="pass the folder of a git checkout (`git -C DIR status` works there)",
        )


def _resolve(repo: Path, rev: str, flag: str) -> str:
    done = _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if done.returncode != 0:
        raise ConfigError(
            f"{flag} {rev}: no such revision in {repo}",
            hint=f"give a commit, branch or tag of that repository (`git -C {repo} log`)",
        )
    return done.stdout.strip()


def git_diff(repo: Path, base: str, head: str) -> str:
    """``git diff -M -U0 base head`` in ``repo``: unknown folders and revisions are
    :class:`ConfigError` naming ``--repo``, ``--base`` or ``--head``."""
    _check_repo(repo)
    new = _resolve(repo, head, "--head")  # first: a wrong head makes its default base wrong
    old = _resolve(repo, base, "--base")
    done = _git(repo, "diff", "-M", "-U0", "--no-color", "--no-ext-diff", old, new)
    if done.returncode != 0:
        raise DataError(f"git diff {base} {head} failed: {done.stderr.strip()}")
    return done.stdout


def changed_files(repo: Path, base: str, head: str) -> list[FileChange]:
    """The files ``head`` changes against ``base``, with their changed lines."""
    return parse_diff(git_diff(repo, base, head))


def file_at(repo: Path, rev: str, path: str) -> str | None:
    """The text of ``path`` at ``rev``; None when it is not there or not UTF-8 text."""
    done = subprocess.run(
        ["git", "-C", str(repo), "show", f"{rev}:{path}"],
        capture_output=True,
        env=_env(),
        check=False,
    )
    if done.returncode != 0:
        return None
    try:
        return done.stdout.decode("utf-8")
    except UnicodeDecodeError:
        return None
