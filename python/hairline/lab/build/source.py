"""Where an arm's code comes from, and what its content is.

A :class:`Source` is a folder, or a git revision of a repository. A revision's content is its
tree id; a folder's is a sha256 over its files (those git lists, inside a work tree), which
can copy the files as it reads them, so that a copy is exactly the content its hash names.
git runs without the caller's repository variables, so it never reads some other repository.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from hairline.errors import ConfigError, HairlineError

__all__ = [
    "CHUNK_BYTES",
    "EXCLUDED_NAMES",
    "FolderTree",
    "GitTree",
    "Source",
    "content_hash",
    "git",
    "git_env",
    "hash_folder",
    "resolve",
    "tree_hash",
]

# Folders that hold tools' state or build output rather than source; never part of a folder's
# content (inside a git work tree, only their untracked files are left out).
EXCLUDED_NAMES = frozenset({".git", ".hairline", ".venv", "target", "node_modules", "__pycache__"})

# Files are read (and copied) in pieces of this size.
CHUNK_BYTES = 1 << 16

# Variables that would point git (and a build's own git calls) at some other repository.
_GIT_LOCATION_VARS = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
)


@dataclass(frozen=True)
class Source:
    """Where an arm's code comes from: a folder, or a git revision of a repository."""

    path: Path | None = None
    repo: Path | None = None
    rev: str | None = None

    def __post_init__(self) -> None:
        if self.path is not None and (self.repo is not None or self.rev is not None):
            raise ConfigError(
                "an arm's source is either a path or a repo and rev, not both",
                hint="keep `path = ...` for a folder, or `repo = ...` with `rev = ...`",
            )
        if self.path is None and (self.repo is None or not self.rev):
            raise ConfigError(
                "an arm's source needs `path`, or `repo` together with `rev`",
                hint='e.g. path = ".", or repo = "." and rev = "main"',
            )

    def describe(self) -> str:
        """``path /abs/x`` or ``git 1a2b3c4d (main)``; never raises."""
        if self.path is not None:
            return f"path {self.path.absolute()}"
        try:
            return _resolve_git(self).describe()
        except HairlineError:
            return f"git {self.rev} (unresolved)"


@dataclass(frozen=True)
class GitTree:
    """A git revision resolved: its commit and its tree."""

    repo: Path
    rev: str
    commit: str
    tree: str

    def describe(self) -> str:
        short = self.commit[:8]
        if self.commit.lower().startswith(self.rev.lower()):
            return f"git {short}"
        return f"git {short} ({self.rev})"


@dataclass(frozen=True)
class FolderTree:
    """A folder resolved: the files that are its content, and whether git listed them."""

    root: Path
    files: tuple[str, ...]
    in_git: bool

    def describe(self) -> str:
        return f"path {self.root}"


def git_env() -> dict[str, str]:
    """This environment without the variables that would point git at another repository."""
    return {k: v for k, v in os.environ.items() if k not in _GIT_LOCATION_VARS}


def git(args: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``git ARGS`` in ``cwd``, its output kept; its exit status is the caller's to read."""
    return subprocess.run(
        ["git", *args],
        cwd=cwd,
        env=git_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )


def _resolve_git(source: Source) -> GitTree:
    assert source.repo is not None and source.rev is not None
    repo = source.repo.absolute()
    where = f"repo {repo}"
    if not repo.is_dir():
        raise ConfigError(
            f"{where} is not a folder", hint="set `repo` to the folder of a git repository"
        )
    try:
        commit = git(
            ["rev-parse", "--verify", "--end-of-options", f"{source.rev}^{{commit}}"], repo
        )
    except FileNotFoundError as err:
        raise ConfigError(
            "git is not installed, so a git revision cannot be built",
            hint="install git, or point the arm's source at a folder with `path`",
        ) from err
    if commit.returncode != 0:
        detail = commit.stderr.strip().splitlines()
        reason = detail[-1] if detail else f"git exited with status {commit.returncode}"
        inside = git(["rev-parse", "--git-dir"], repo).returncode == 0
        hint = (
            f"`git -C {repo} log --oneline` lists revisions; fetch it first if it is remote"
            if inside
            else f"{repo} is not a git repository: set `repo` to one, or use `path`"
        )
        raise ConfigError(f"{where}: cannot resolve revision {source.rev!r}: {reason}", hint=hint)
    sha = commit.stdout.strip()
    tree = git(["rev-parse", "--verify", f"{sha}^{{tree}}"], repo)
    if tree.returncode != 0:
        raise ConfigError(
            f"{where}: commit {sha} has no readable tree: {tree.stderr.strip()}",
            hint=f"run `git -C {repo} fsck`",
        )
    return GitTree(repo=repo, rev=source.rev, commit=sha, tree=tree.stdout.strip())


def _walk(root: Path, prefix: str = "") -> list[str]:
    """Files and symlinks under ``root`` (relative, with ``prefix``), excluded folders pruned."""
    found: list[str] = []
    for current, dirnames, filenames in os.walk(root / prefix if prefix else root):
        rel_dir = os.path.relpath(current, root)
        keep: list[str] = []
        for name in dirnames:
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if os.path.islink(os.path.join(current, name)):
                found.append(rel)
            elif name not in EXCLUDED_NAMES:
                keep.append(name)
        dirnames[:] = keep
        for name in filenames:
            if name != ".git":
                found.append(name if rel_dir == "." else f"{rel_dir}/{name}")
    return found


def _in_git_work_tree(root: Path) -> bool:
    try:
        inside = git(["rev-parse", "--is-inside-work-tree"], root)
    except FileNotFoundError:
        return False
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        return False
    # A folder git ignores (a build output, say) is listed by nobody: treat it as plain.
    return git(["check-ignore", "-q", "."], root).returncode != 0


def _git_files(root: Path) -> list[str]:
    def ls(*flags: str) -> list[str]:
        listed = git(["ls-files", "-z", *flags], root)
        if listed.returncode != 0:
            raise ConfigError(
                f"git ls-files failed in {root}: {listed.stderr.strip()}",
                hint=f"run `git -C {root} status` to see what is wrong with the repository",
            )
        return [p for p in listed.stdout.split("\0") if p]

    found: list[str] = []
    for rel in ls("-c"):
        full = root / rel
        if full.is_dir() and not full.is_symlink():
            found.extend(_walk(root, rel))  # a submodule: its checked-out files
        elif os.path.lexists(full):  # tracked but deleted files are not content
            found.append(rel)
    for rel in ls("-o", "--exclude-standard"):
        rel = rel.rstrip("/")
        if any(part in EXCLUDED_NAMES for part in PurePosixPath(rel).parts[:-1]):
            continue
        full = root / rel
        if full.is_dir() and not full.is_symlink():
            found.extend(_walk(root, rel))  # an untracked nested repository
        else:
            found.append(rel)
    return found


def _resolve_folder(source: Source) -> FolderTree:
    assert source.path is not None
    root = source.path.absolute()
    if not root.is_dir():
        raise ConfigError(
            f"source path {root} is not a folder",
            hint="set the arm's `path` to the folder that holds its code",
        )
    in_git = _in_git_work_tree(root)
    files = _git_files(root) if in_git else _walk(root)
    return FolderTree(root=root, files=tuple(sorted(set(files))), in_git=in_git)


def resolve(source: Source) -> GitTree | FolderTree:
    """A source's tree or files as they are now; :class:`ConfigError` for a bad source."""
    return _resolve_folder(source) if source.path is not None else _resolve_git(source)


# ----------------------------------------------------------------------------- hashing


def _entry_record(rel: str, mode: bytes, digest: str) -> bytes:
    return os.fsencode(rel) + b"\0" + mode + b"\0" + digest.encode() + b"\n"


def hash_folder(root: Path, files: Sequence[str], *, copy_to: Path | None = None) -> str:
    """sha256 over sorted (path, executable bit, content sha256); optionally copies as it reads.

    Copying and hashing in one pass means a copy is exactly the content its hash names.
    """
    total = hashlib.sha256()
    for rel in files:
        src = root / rel
        try:
            st = os.lstat(src)
        except FileNotFoundError:
            continue  # deleted since it was listed
        dst = copy_to / rel if copy_to is not None else None
        if dst is not None:
            dst.parent.mkdir(parents=True, exist_ok=True)
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(src)
            digest = hashlib.sha256(os.fsencode(target)).hexdigest()
            total.update(_entry_record(rel, b"l", digest))
            if dst is not None:
                os.symlink(target, dst)
        elif stat.S_ISREG(st.st_mode):
            mode = b"x" if st.st_mode & stat.S_IXUSR else b"-"
            digest = _copy_file(src, dst, st.st_mode) if dst else _file_sha256(src)
            total.update(_entry_record(rel, mode, digest))
        # Sockets, FIFOs and devices are not source, and reading a FIFO would block.
    return total.hexdigest()


def _file_sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _copy_file(src: Path, dst: Path, mode: int) -> str:
    digest = hashlib.sha256()
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        while chunk := fin.read(CHUNK_BYTES):
            digest.update(chunk)
            fout.write(chunk)
    os.chmod(dst, stat.S_IMODE(mode))
    return digest.hexdigest()


def content_hash(resolved: GitTree | FolderTree) -> str:
    """The content hash of a resolved source (:func:`tree_hash`)."""
    if isinstance(resolved, GitTree):
        return resolved.tree
    return hash_folder(resolved.root, resolved.files)


def tree_hash(source: Source) -> str:
    """The content hash of a source tree.

    A git revision's tree id; for a folder, a sha256 over its sorted (relative path,
    executable bit, content sha256). Inside a git work tree a folder's files are those git
    lists (tracked, plus untracked ones not ignored), so ignored build output never changes
    the hash; elsewhere every file except those under :data:`EXCLUDED_NAMES` folders.
    """
    return content_hash(resolve(source))
