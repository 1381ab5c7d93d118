"""Each arm built once, and its artifact cached by content.

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
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from hairline.errors import BuildFailed, ConfigError
from hairline.lab.build.command import run_command
from hairline.lab.build.sandbox import BuildSandbox
from hairline.lab.build.source import (
    EXCLUDED_NAMES,
    FolderTree,
    GitTree,
    Source,
    content_hash,
    git,
    hash_folder,
    resolve,
    tree_hash,
)

__all__ = ["BuildResult", "BuildSpec", "build", "build_key"]

# Bumped whenever the key's recipe changes, so old cache entries are never mistaken for new.
_KEY_VERSION = "hairline-build-1"
_LOG_TAIL_LINES = 12


@dataclass(frozen=True)
class BuildSpec:
    """What to build: a source, a shell command run at its root, and what it produces."""

    source: Source
    command: str | None
    artifact: str | None
    env: Mapping[str, str] = field(default_factory=dict)
    # A submitted experiment's build (lab/build/sandbox.py); None: the owner's own.
    sandbox: BuildSandbox | None = None

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
    recipe: dict[str, object] = {
        "version": _KEY_VERSION,
        "tree": tree,
        "command": spec.command,
        "artifact": _artifact_path(spec.artifact),
        "env": sorted(spec.env.items()),
    }
    # A sandboxed build's artifact is never served to an owner's unsandboxed run, nor the
    # other way round: each has entries of its own.
    if spec.sandbox is not None:
        recipe["sandboxed"] = True
    encoded = json.dumps(recipe, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(encoded.encode()).hexdigest()


def build_key(spec: BuildSpec) -> str:
    """The cache key: sha256 of (tree hash, command, artifact, sorted env, sandboxed)."""
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
            git(["worktree", "remove", "--force", str(work)], repo)
        _rmtree(work)
        git(["worktree", "prune"], repo)


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


def _check_cache_outside(folder: FolderTree, cache_dir: Path) -> None:
    try:
        rel = cache_dir.relative_to(folder.root)
    except ValueError:
        return
    if rel.parts and any(part in EXCLUDED_NAMES for part in rel.parts):
        return
    if rel.parts and folder.in_git:
        ignored = git(["check-ignore", "-q", f"{rel.as_posix()}/"], folder.root)
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
    resolved = resolve(spec.source)
    if isinstance(resolved, FolderTree):
        _check_cache_outside(resolved, cache_dir)
    source = resolved.describe()
    tree = content_hash(resolved)
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
    resolved: GitTree | FolderTree,
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
            log=failed_log,
        )

    worktree_added = False
    try:
        if isinstance(resolved, GitTree):
            added = git(
                ["worktree", "add", "--detach", "--quiet", str(work), resolved.commit],
                resolved.repo,
            )
            worktree_added = added.returncode == 0 or (work / ".git").exists()
            if added.returncode != 0:
                output.write_text(added.stderr)
                raise fail(f"git worktree add exited with status {added.returncode}")
        else:
            copied = hash_folder(resolved.root, resolved.files, copy_to=work)
            work.mkdir(exist_ok=True)  # an empty folder has no files to create it
            if copied != tree:
                raise fail(
                    "the folder changed while it was being copied; build again, "
                    "or build a git revision to pin the content"
                )

        outcome = "nothing to run"
        if spec.command is not None:
            command_started = time.monotonic()
            status, timed_out = run_command(
                spec.command, work, spec.env, output, timeout_s, on_output, sandbox=spec.sandbox
            )
            if timed_out:
                raise fail(f"timed out after {timeout_s:g} s")
            if status != 0:
                raise fail(f"exit status {status}" if status > 0 else f"killed by signal {-status}")
            outcome = f"exit status 0 after {time.monotonic() - command_started:.2f} s"

        if artifact is None:
            if isinstance(resolved, GitTree):
                (work / ".git").unlink()  # the worktree's link to the repo; pruned below
            os.rename(work, tmp / "tree")
        else:
            produced = work / artifact
            if not produced.exists():
                made = "made" if spec.command is not None else "holds"
                raise fail(f"the tree {made} no artifact {artifact}")
            _move_artifact(produced, _entry_artifact(tmp, artifact))
        if isinstance(resolved, GitTree):
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
        if worktree_added and isinstance(resolved, GitTree):
            _remove_worktree(resolved.repo, work)
        _rmtree(tmp)
