"""The lab's build phase: each arm is built once, and its artifact cached by content.

An arm's code comes from a :class:`Source` (a folder, or a git revision of a repository).
Its cache key is a sha256 of the source tree's content hash, the build command, the
artifact path and the build's extra environment, so a second experiment on the same
revisions builds nothing (ServiceLab section 4: the build service is a caching layer).

A cache entry ``cache_dir/<key>/`` holds::

    out/<basename of artifact>   the artifact (file or folder), or
    tree/                        the whole built tree when the spec names no artifact
    build.log                    the command's stdout and stderr, command and timing on top
    build.json                   key, source, command, env, duration, created

Builds never run in the user's tree: a git revision is checked out with
``git worktree add --detach`` and a folder is copied, both into ``cache_dir/.tmp-<key>-*``,
which is renamed to ``cache_dir/<key>`` only once complete, so an entry that exists is
whole. ``cache_dir/<key>.lock`` (``flock``) makes concurrent builds of one key run once.
A failed build leaves no entry; its log is kept at ``cache_dir/failed/<key>.log``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import hashlib
import json
import os
import select
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from hairline.errors import BuildFailed, ConfigError, HairlineError

__all__ = ["BuildResult", "BuildSpec", "Source", "build", "build_key", "tree_hash"]

# Folders that hold tools' state or build output rather than source; never part of a folder's
# content (inside a git work tree, only their untracked files are left out).
EXCLUDED_NAMES = frozenset({".git", ".hairline", ".venv", "target", "node_modules", "__pycache__"})

# Bumped whenever the key's recipe changes, so old cache entries are never mistaken for new.
_KEY_VERSION = "hairline-build-1"
_LOG_TAIL_LINES = 12
# After the build's shell exits, how long a grandchild may keep writing before we stop reading.
_DRAIN_S = 0.5
_CHUNK_BYTES = 1 << 16
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
class BuildSpec:
    """What to build: a source, a shell command run at its root, and what it produces."""

    source: Source
    command: str | None
    artifact: str | None
    env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _artifact_path(self.artifact)
        for name, value in self.env.items():
            if not isinstance(name, str) or not name or "=" in name or "\0" in name:
                raise ConfigError(
                    f"build environment variable name {name!r} is not valid",
                    hint="names are non-empty and contain neither '=' nor NUL",
                )
            if not isinstance(value, str) or "\0" in value:
                raise ConfigError(
                    f"build environment variable {name} must be a string without NUL",
                    hint=f'quote the value: {name} = "..."',
                )


@dataclass(frozen=True)
class BuildResult:
    """A built (or cached) artifact. ``duration_s`` is the time this call took."""

    key: str
    tree_hash: str
    artifact: Path
    log: Path | None
    cached: bool
    duration_s: float
    source: str


# ----------------------------------------------------------------------------- sources


@dataclass(frozen=True)
class _GitTree:
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
class _FolderTree:
    root: Path
    files: tuple[str, ...]
    in_git: bool

    def describe(self) -> str:
        return f"path {self.root}"


def _git_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in _GIT_LOCATION_VARS}


def _git(args: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", *args],
        cwd=cwd,
        env=_git_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )


def _resolve_git(source: Source) -> _GitTree:
    assert source.repo is not None and source.rev is not None
    repo = source.repo.absolute()
    where = f"repo {repo}"
    if not repo.is_dir():
        raise ConfigError(
            f"{where} is not a folder", hint="set `repo` to the folder of a git repository"
        )
    try:
        commit = _git(
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
        inside = _git(["rev-parse", "--git-dir"], repo).returncode == 0
        hint = (
            f"`git -C {repo} log --oneline` lists revisions; fetch it first if it is remote"
            if inside
            else f"{repo} is not a git repository: set `repo` to one, or use `path`"
        )
        raise ConfigError(f"{where}: cannot resolve revision {source.rev!r}: {reason}", hint=hint)
    sha = commit.stdout.strip()
    tree = _git(["rev-parse", "--verify", f"{sha}^{{tree}}"], repo)
    if tree.returncode != 0:
        raise ConfigError(
            f"{where}: commit {sha} has no readable tree: {tree.stderr.strip()}",
            hint=f"run `git -C {repo} fsck`",
        )
    return _GitTree(repo=repo, rev=source.rev, commit=sha, tree=tree.stdout.strip())


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
        inside = _git(["rev-parse", "--is-inside-work-tree"], root)
    except FileNotFoundError:
        return False
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        return False
    # A folder git ignores (a build output, say) is listed by nobody: treat it as plain.
    return _git(["check-ignore", "-q", "."], root).returncode != 0


def _git_files(root: Path) -> list[str]:
    def ls(*flags: str) -> list[str]:
        listed = _git(["ls-files", "-z", *flags], root)
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


def _resolve_folder(source: Source) -> _FolderTree:
    assert source.path is not None
    root = source.path.absolute()
    if not root.is_dir():
        raise ConfigError(
            f"source path {root} is not a folder",
            hint="set the arm's `path` to the folder that holds its code",
        )
    in_git = _in_git_work_tree(root)
    files = _git_files(root) if in_git else _walk(root)
    return _FolderTree(root=root, files=tuple(sorted(set(files))), in_git=in_git)


def _resolve(source: Source) -> _GitTree | _FolderTree:
    return _resolve_folder(source) if source.path is not None else _resolve_git(source)


# ----------------------------------------------------------------------------- hashing


def _entry_record(rel: str, mode: bytes, digest: str) -> bytes:
    return os.fsencode(rel) + b"\0" + mode + b"\0" + digest.encode() + b"\n"


def _hash_folder(root: Path, files: Sequence[str], *, copy_to: Path | None = None) -> str:
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
        while chunk := fin.read(_CHUNK_BYTES):
            digest.update(chunk)
            fout.write(chunk)
    os.chmod(dst, stat.S_IMODE(mode))
    return digest.hexdigest()


def _tree_hash(resolved: _GitTree | _FolderTree) -> str:
    if isinstance(resolved, _GitTree):
        return resolved.tree
    return _hash_folder(resolved.root, resolved.files)


def _artifact_path(artifact: str | None) -> str | None:
    """The artifact relative to the tree root in normal form; None means the tree itself."""
    if artifact is None:
        return None
    path = PurePosixPath(artifact)
    if path.is_absolute() or ".." in path.parts:
        raise ConfigError(
            f"build artifact {artifact!r} must be a path inside the source tree",
            hint='write it relative to the tree root, e.g. artifact = "target/release/app"',
        )
    return None if str(path) == "." else str(path)


def _key(tree: str, spec: BuildSpec) -> str:
    recipe = {
        "version": _KEY_VERSION,
        "tree": tree,
        "command": spec.command,
        "artifact": _artifact_path(spec.artifact),
        "env": sorted(spec.env.items()),
    }
    encoded = json.dumps(recipe, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(encoded.encode()).hexdigest()


def tree_hash(source: Source) -> str:
    """The content hash of a source tree.

    A git revision's tree id; for a folder, a sha256 over its sorted (relative path,
    executable bit, content sha256). Inside a git work tree a folder's files are those git
    lists (tracked, plus untracked ones not ignored), so ignored build output never changes
    the hash; elsewhere every file except those under :data:`EXCLUDED_NAMES` folders.
    """
    return _tree_hash(_resolve(source))


def build_key(spec: BuildSpec) -> str:
    """The cache key: sha256 of (tree hash, command, artifact, sorted env)."""
    return _key(tree_hash(spec.source), spec)


# ----------------------------------------------------------------------------- building


def _entry_artifact(entry: Path, artifact: str | None) -> Path:
    return entry / "tree" if artifact is None else entry / "out" / PurePosixPath(artifact).name


def _cached_result(
    entry: Path, spec: BuildSpec, tree: str, source: str, started: float
) -> BuildResult:
    log = entry / "build.log"
    return BuildResult(
        key=entry.name,
        tree_hash=tree,
        artifact=_entry_artifact(entry, _artifact_path(spec.artifact)),
        log=log if log.is_file() else None,
        cached=True,
        duration_s=time.monotonic() - started,
        source=source,
    )


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    # "a" creates the file without truncating it; the lock is the open file description's.
    with open(path, "ab") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _rmtree(path: Path) -> None:
    def make_writable(func: Callable[..., Any], failed: str, _exc: Any) -> None:
        # Some builds leave read-only folders (Go's module cache, for one).
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(failed), stat.S_IRWXU)
            func(failed)

    if os.path.lexists(path):
        shutil.rmtree(path, onerror=make_writable)


def _remove_worktree(repo: Path, work: Path) -> None:
    """Unregister and delete a worktree; never raises, so it cannot mask a build's error."""
    with contextlib.suppress(OSError):
        if (work / ".git").exists():
            _git(["worktree", "remove", "--force", str(work)], repo)
        _rmtree(work)
        _git(["worktree", "prune"], repo)


def _utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _log_header(
    spec: BuildSpec, source: str, tree: str, key: str, created: str, outcome: str
) -> str:
    env = " ".join(f"{k}={v}" for k, v in sorted(spec.env.items())) or "-"
    return (
        f"# hairline build of {source}\n"
        f"# command:  {spec.command}\n"
        f"# env:      {env}\n"
        f"# artifact: {_artifact_path(spec.artifact) or '(the tree)'}\n"
        f"# tree:     {tree}\n"
        f"# key:      {key}\n"
        f"# started:  {created}\n"
        f"# finished: {outcome}\n"
        "# ----\n"
    )


def _write_log(path: Path, header: str, output: Path | None) -> None:
    with open(path, "wb") as log:
        log.write(header.encode())
        if output is not None and output.exists():
            with open(output, "rb") as body:
                shutil.copyfileobj(body, log)


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> list[str]:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    body = text.split("# ----\n", 1)[-1]
    return body.splitlines()[-lines:]


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _pump(
    proc: subprocess.Popen[bytes],
    out: Any,
    deadline: float,
    on_output: Callable[[str], None] | None,
) -> bool:
    """Tee the build's output until EOF; returns True when the deadline passed first."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    pending = b""
    exited_at: float | None = None
    while True:
        now = time.monotonic()
        if now >= deadline:
            return True
        ready, _, _ = select.select([fd], [], [], min(0.1, deadline - now))
        if ready:
            chunk = os.read(fd, _CHUNK_BYTES)
            if not chunk:
                # The pipe closed, but the build may go on with its output elsewhere.
                try:
                    proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
                except subprocess.TimeoutExpired:
                    return True
                break
            out.write(chunk)
            if on_output is not None:
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    on_output(line.decode(errors="replace").rstrip("\r"))
            continue
        # A daemon the build started may hold the pipe open forever: stop soon after exit.
        if proc.poll() is not None:
            exited_at = now if exited_at is None else exited_at
            if now - exited_at >= _DRAIN_S:
                break
    if pending and on_output is not None:
        on_output(pending.decode(errors="replace").rstrip("\r"))
    return False


def _run_command(
    command: str,
    cwd: Path,
    env: Mapping[str, str],
    output: Path,
    timeout_s: float,
    on_output: Callable[[str], None] | None,
) -> tuple[int, bool]:
    """Run ``sh -c command`` in its own process group; returns (exit status, timed out)."""
    with open(output, "wb") as out:
        proc = subprocess.Popen(
            ["sh", "-c", command],
            cwd=cwd,
            env={**_git_env(), **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            timed_out = _pump(proc, out, time.monotonic() + timeout_s, on_output)
        finally:
            # Whatever the build left running (or all of it, on timeout) goes with it.
            _kill_group(proc)
            proc.wait()
            assert proc.stdout is not None
            proc.stdout.close()
    return proc.returncode, timed_out


def _move_artifact(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_symlink():
        # A link into the tree (or to a store path) would dangle once moved: keep its target.
        if src.is_dir():
            shutil.copytree(src, dst, symlinks=True)
        else:
            shutil.copy2(src, dst)
    else:
        os.rename(src, dst)


def _check_cache_outside(folder: _FolderTree, cache_dir: Path) -> None:
    try:
        rel = cache_dir.relative_to(folder.root)
    except ValueError:
        return
    if rel.parts and any(part in EXCLUDED_NAMES for part in rel.parts):
        return
    if rel.parts and folder.in_git:
        ignored = _git(["check-ignore", "-q", f"{rel.as_posix()}/"], folder.root)
        if ignored.returncode == 0:
            return
    raise ConfigError(
        f"the build cache {cache_dir} is inside the source folder {folder.root} "
        "and would become part of its content",
        hint="keep the cache under .hairline/ (the default), or add it to .gitignore",
    )


def build(
    spec: BuildSpec,
    cache_dir: Path,
    *,
    timeout_s: float = 1800,
    on_output: Callable[[str], None] | None = None,
) -> BuildResult:
    """Build ``spec`` once and return its cached artifact.

    Runs nothing when ``cache_dir`` already holds the key; waits for a concurrent build of
    the same key instead of repeating it. ``command=None`` runs nothing but still copies
    the artifact (or tree) into the cache, so ``result.artifact`` is always an immutable
    copy of exactly the content the key names. ``on_output`` gets each output line.

    Raises :class:`ConfigError` for a bad source and :class:`BuildFailed` when the command
    fails, times out or leaves no artifact.
    """
    if not timeout_s > 0:
        raise ConfigError(
            f"build timeout must be positive, not {timeout_s}", hint="e.g. timeout_s = 1800"
        )
    started = time.monotonic()
    cache_dir = cache_dir.absolute()
    cache_dir.mkdir(parents=True, exist_ok=True)
    resolved = _resolve(spec.source)
    if isinstance(resolved, _FolderTree):
        _check_cache_outside(resolved, cache_dir)
    source = resolved.describe()
    tree = _tree_hash(resolved)
    key = _key(tree, spec)
    entry = cache_dir / key
    if entry.is_dir():
        return _cached_result(entry, spec, tree, source, started)
    with _locked(cache_dir / f"{key}.lock"):
        if entry.is_dir():  # built by whoever held the lock before us
            return _cached_result(entry, spec, tree, source, started)
        # Holding the lock, any temp folder of this key is a crashed build's leftover.
        for stale in cache_dir.glob(f".tmp-{key}-*"):
            _rmtree(stale)
        return _build_locked(
            spec, resolved, cache_dir, key, tree, source, started, timeout_s, on_output
        )


def _build_locked(
    spec: BuildSpec,
    resolved: _GitTree | _FolderTree,
    cache_dir: Path,
    key: str,
    tree: str,
    source: str,
    started: float,
    timeout_s: float,
    on_output: Callable[[str], None] | None,
) -> BuildResult:
    artifact = _artifact_path(spec.artifact)
    created = _utc_now()
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{key}-", dir=cache_dir))
    os.chmod(tmp, 0o755)  # mkdtemp's 0700 would hide the published entry from other users
    # Named by key so `git worktree list` shows what it is and concurrent builds never clash.
    work = tmp / f"hairline-build-{key[:16]}"
    output = tmp / "output"

    def fail(reason: str) -> BuildFailed:
        failed_log = cache_dir / "failed" / f"{key}.log"
        failed_log.parent.mkdir(exist_ok=True)
        elapsed_s = time.monotonic() - started
        _write_log(
            failed_log,
            _log_header(spec, source, tree, key, created, f"{reason} after {elapsed_s:.2f} s"),
            output,
        )
        tail = _tail(failed_log)
        shown = ("\n  log: " + "\n  log: ".join(tail)) if tail else ""
        return BuildFailed(
            f"build of {source} failed: {reason}{shown}",
            hint=f"the full build log is {failed_log}",
        )

    worktree_added = False
    try:
        if isinstance(resolved, _GitTree):
            added = _git(
                ["worktree", "add", "--detach", "--quiet", str(work), resolved.commit],
                resolved.repo,
            )
            worktree_added = added.returncode == 0 or (work / ".git").exists()
            if added.returncode != 0:
                output.write_text(added.stderr)
                raise fail(f"git worktree add exited with status {added.returncode}")
        else:
            copied = _hash_folder(resolved.root, resolved.files, copy_to=work)
            work.mkdir(exist_ok=True)  # an empty folder has no files to create it
            if copied != tree:
                raise fail(
                    "the folder changed while it was being copied; build again, "
                    "or build a git revision to pin the content"
                )

        outcome = "nothing to run"
        if spec.command is not None:
            command_started = time.monotonic()
            status, timed_out = _run_command(
                spec.command, work, spec.env, output, timeout_s, on_output
            )
            if timed_out:
                raise fail(f"timed out after {timeout_s:g} s")
            if status != 0:
                raise fail(f"exit status {status}" if status > 0 else f"killed by signal {-status}")
            outcome = f"exit status 0 after {time.monotonic() - command_started:.2f} s"

        if artifact is None:
            if isinstance(resolved, _GitTree):
                (work / ".git").unlink()  # the worktree's link to the repo; pruned below
            os.rename(work, tmp / "tree")
        else:
            produced = work / artifact
            if not produced.exists():
                made = "made" if spec.command is not None else "holds"
                raise fail(f"the tree {made} no artifact {artifact}")
            _move_artifact(produced, _entry_artifact(tmp, artifact))
        if isinstance(resolved, _GitTree):
            _remove_worktree(resolved.repo, work)
            worktree_added = False
        else:
            _rmtree(work)

        log: Path | None = None
        if spec.command is not None:
            log = tmp / "build.log"
            _write_log(log, _log_header(spec, source, tree, key, created, outcome), output)
        output.unlink(missing_ok=True)
        duration_s = time.monotonic() - started
        record = {
            "key": key,
            "source": source,
            "tree_hash": tree,
            "command": spec.command,
            "artifact": artifact,
            "artifact_path": _entry_artifact(tmp, artifact).relative_to(tmp).as_posix(),
            "env": dict(sorted(spec.env.items())),
            "duration_s": round(duration_s, 3),
            "created": created,
        }
        (tmp / "build.json").write_text(json.dumps(record, indent=2) + "\n")
        entry = cache_dir / key
        try:
            os.rename(tmp, entry)
        except OSError as err:
            # Someone published without the lock (a hand-made entry?): theirs stands.
            if err.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
        return BuildResult(
            key=key,
            tree_hash=tree,
            artifact=_entry_artifact(entry, artifact),
            log=entry / "build.log" if log is not None else None,
            cached=False,
            duration_s=duration_s,
            source=source,
        )
    finally:
        if worktree_added and isinstance(resolved, _GitTree):
            _remove_worktree(resolved.repo, work)
        _rmtree(tmp)
