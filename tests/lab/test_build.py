"""The build phase on real git repositories and folders, with real shell commands.

Every build here appends a line to a counter file outside the source tree, so a test can
tell how many times a command really ran::

    spec = BuildSpec(Source(repo=repo, rev="main"), command=f"... >> {counter}", artifact="app")
    first, second = build(spec, cache), build(spec, cache)
    assert second.cached and counter.read_text().count("ran") == 1
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hairline.errors import BuildFailed, ConfigError
from hairline.lab.build import (
    BuildResult,
    BuildSpec,
    Source,
    build,
    build_key,
    tree_hash,
)

GIT_IDENTITY = ["-c", "user.name=hairline test", "-c", "user.email=test@example.invalid"]


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *GIT_IDENTITY, "-c", "commit.gpgsign=false", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository on `main` with a greeting, a build script and an ignored `target/`."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "-c", "init.defaultBranch=main", "init", "-q")
    write(root / ".gitignore", "target/\n")
    write(root / "greeting.txt", "hello\n")
    script = write(root / "make.sh", 'mkdir -p target\ncp greeting.txt target/app\necho "built"\n')
    script.chmod(0o755)
    commit_all(root, "first")
    return root


@pytest.fixture
def counter(tmp_path: Path) -> Path:
    return tmp_path / "runs.txt"


def runs(counter: Path) -> int:
    return counter.read_text().count("ran") if counter.exists() else 0


def app_spec(source: Source, counter: Path, **env: str) -> BuildSpec:
    return BuildSpec(
        source=source,
        command=f"./make.sh && echo ran >> {counter}",
        artifact="target/app",
        env=env,
    )


def worktrees(repo: Path) -> list[str]:
    listed = git(repo, "worktree", "list", "--porcelain").splitlines()
    return [line.removeprefix("worktree ") for line in listed if line.startswith("worktree ")]


def test_a_revision_builds_once_and_the_second_build_is_cached(
    repo: Path, counter: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    spec = app_spec(Source(repo=repo, rev="main"), counter)

    first = build(spec, cache)
    second = build(spec, cache)

    assert runs(counter) == 1
    assert (first.cached, second.cached) == (False, True)
    assert first.key == second.key == build_key(spec)
    assert first.artifact == second.artifact == cache / first.key / "out" / "app"
    assert first.artifact.read_text() == "hello\n"
    assert first.tree_hash == git(repo, "rev-parse", "main^{tree}")
    assert first.source.startswith("git ") and first.source.endswith("(main)")

    assert first.log is not None and first.log == second.log
    log = first.log.read_text()
    assert f"# command:  {spec.command}" in log.splitlines()[1]
    assert "exit status 0 after" in log and log.rstrip().endswith("built")
    record = json.loads((cache / first.key / "build.json").read_text())
    assert record["key"] == first.key and record["command"] == spec.command
    assert record["duration_s"] >= 0 and record["created"].endswith("Z")
    assert worktrees(repo) == [str(repo)]  # only the repository's own
    assert not list(cache.glob(".tmp-*"))


def test_two_commits_with_the_same_tree_share_one_entry(
    repo: Path, counter: Path, tmp_path: Path
) -> None:
    first = build(app_spec(Source(repo=repo, rev="main"), counter), tmp_path / "cache")
    git(repo, "commit", "-q", "--allow-empty", "-m", "nothing changed")
    again = build(app_spec(Source(repo=repo, rev="main"), counter), tmp_path / "cache")
    assert again.cached and again.key == first.key and runs(counter) == 1


def test_progress_lines_reach_on_output(repo: Path, counter: Path, tmp_path: Path) -> None:
    lines: list[str] = []
    build(app_spec(Source(repo=repo, rev="HEAD"), counter), tmp_path / "c", on_output=lines.append)
    assert lines == ["built"]


def test_folder_key_follows_content_but_not_ignored_files(repo: Path, tmp_path: Path) -> None:
    folder = Source(path=repo)
    spec = BuildSpec(folder, command="./make.sh", artifact="target/app")
    before = build_key(spec)

    write(repo / "target" / "leftover.o", "ignored build output")
    (repo / "notes").mkdir()
    write(repo / ".hairline" / "state.db", "untracked tool state")
    assert build_key(spec) == before

    write(repo / "greeting.txt", "hello, world\n")
    assert build_key(spec) != before
    write(repo / "greeting.txt", "hello\n")
    assert build_key(spec) == before

    write(repo / "new.txt", "an untracked, unignored file is content")
    assert build_key(spec) != before
    (repo / "new.txt").unlink()
    (repo / "make.sh").chmod(0o644)
    assert build_key(spec) != before  # the executable bit is content too


def test_folder_outside_git_skips_tool_folders(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    write(root / "main.py", "print('hi')\n")
    before = tree_hash(Source(path=root))
    for name in ("target", "node_modules", "__pycache__", ".venv", ".git", ".hairline"):
        write(root / name / "x", "not source")
    write(root / "sub" / "target" / "y", "not source at any depth")
    assert tree_hash(Source(path=root)) == before
    write(root / "sub" / "z.py", "")
    assert tree_hash(Source(path=root)) != before


def test_a_folder_build_never_touches_the_folder(repo: Path, counter: Path, tmp_path: Path) -> None:
    result = build(app_spec(Source(path=repo), counter), tmp_path / "cache")
    assert result.artifact.read_text() == "hello\n"
    assert not (repo / "target").exists()
    assert result.source == f"path {repo}"
    assert result.tree_hash == tree_hash(Source(path=repo))


def test_env_is_part_of_the_key_and_each_build_gets_its_own(repo: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    source = Source(path=repo)

    def greeting(word: str) -> BuildResult:
        spec = BuildSpec(
            source, command='printf "$WORD" > out.txt', artifact="out.txt", env={"WORD": word}
        )
        return build(spec, cache)

    hi, bye = greeting("hi"), greeting("bye")
    assert hi.key != bye.key
    assert (hi.artifact.read_text(), bye.artifact.read_text()) == ("hi", "bye")
    assert hi.tree_hash == bye.tree_hash


def test_a_revision_and_a_folder_of_the_same_content_both_build(
    repo: Path, counter: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    from_git = build(app_spec(Source(repo=repo, rev="main"), counter), cache)
    from_folder = build(app_spec(Source(path=repo), counter), cache)
    assert from_git.artifact.read_text() == from_folder.artifact.read_text() == "hello\n"
    # Different hash functions (git's tree id, hairline's folder sha256): two entries.
    assert from_git.key != from_folder.key and runs(counter) == 2


def test_an_older_revision_builds_its_own_content(
    repo: Path, counter: Path, tmp_path: Path
) -> None:
    write(repo / "greeting.txt", "hello again\n")
    commit_all(repo, "second")
    old = build(app_spec(Source(repo=repo, rev="HEAD~1"), counter), tmp_path / "c")
    new = build(app_spec(Source(repo=repo, rev="main"), counter), tmp_path / "c")
    assert (old.artifact.read_text(), new.artifact.read_text()) == ("hello\n", "hello again\n")
    assert old.source.endswith("(HEAD~1)")


def test_without_a_command_the_tree_is_cached_as_is(repo: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    spec = BuildSpec(Source(repo=repo, rev="main"), command=None, artifact=None)
    result = build(spec, cache)
    assert result.artifact == cache / result.key / "tree"
    assert sorted(p.name for p in result.artifact.iterdir()) == [
        ".gitignore",
        "greeting.txt",
        "make.sh",
    ]
    assert (result.artifact / "make.sh").stat().st_mode & 0o100
    assert result.log is None and not result.cached
    assert worktrees(repo) == [str(repo)]
    assert build(spec, cache).cached


def test_concurrent_builds_of_one_key_run_the_command_once(
    repo: Path, counter: Path, tmp_path: Path
) -> None:
    """False failure: none: a lock makes one build and one cache hit in either order; the 0.3 s
    sleep only makes them overlap, and the joins wait 60 s."""
    cache = tmp_path / "cache"
    spec = BuildSpec(
        Source(repo=repo, rev="main"),
        command=f"sleep 0.3 && ./make.sh && echo ran >> {counter}",
        artifact="target/app",
    )
    results: list[BuildResult] = []
    threads = [threading.Thread(target=lambda: results.append(build(spec, cache))) for _ in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert runs(counter) == 1
    assert sorted(r.cached for r in results) == [False, True]
    assert results[0].artifact == results[1].artifact
    assert results[0].artifact.read_text() == "hello\n"


def test_a_failing_build_names_its_log_and_leaves_nothing_behind(
    repo: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    spec = BuildSpec(
        Source(repo=repo, rev="main"),
        command="echo compiling; echo 'error: no such symbol' >&2; exit 3",
        artifact="target/app",
    )
    with pytest.raises(BuildFailed) as caught:
        build(spec, cache)

    failed_log = cache / "failed" / f"{build_key(spec)}.log"
    assert "exit status 3" in caught.value.message
    assert "error: no such symbol" in caught.value.message
    assert caught.value.hint is not None and str(failed_log) in caught.value.hint
    assert "compiling" in failed_log.read_text()
    assert sorted(p.name for p in cache.iterdir() if not p.name.endswith(".lock")) == ["failed"]
    assert worktrees(repo) == [str(repo)]


def test_a_build_without_its_artifact_fails(repo: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    spec = BuildSpec(Source(path=repo), command="true", artifact="target/app")
    with pytest.raises(BuildFailed, match="no artifact target/app"):
        build(spec, cache)
    assert not (cache / build_key(spec)).exists()


def test_a_build_that_runs_too_long_is_killed(repo: Path, tmp_path: Path) -> None:
    """False failure: about 1e-6: a 0.5 s timeout must end the build within 10 s."""
    spec = BuildSpec(Source(repo=repo, rev="main"), command="sleep 30 & sleep 30", artifact=None)
    started = time.monotonic()
    with pytest.raises(BuildFailed, match=r"timed out after 0\.5 s"):
        build(spec, tmp_path / "cache", timeout_s=0.5)
    assert time.monotonic() - started < 10
    assert worktrees(repo) == [str(repo)]


def test_unknown_revisions_and_non_repositories_are_config_errors(
    repo: Path, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match="no-such-branch") as caught:
        tree_hash(Source(repo=repo, rev="no-such-branch"))
    assert caught.value.hint is not None and "git -C" in caught.value.hint

    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(ConfigError) as caught:
        tree_hash(Source(repo=plain, rev="main"))
    assert caught.value.hint is not None and "not a git repository" in caught.value.hint


@pytest.mark.parametrize(
    "make",
    [
        lambda: Source(),
        lambda: Source(repo=Path("."), rev=None),
        lambda: Source(path=Path("."), rev="main"),
        lambda: BuildSpec(Source(path=Path(".")), command="true", artifact="../outside"),
        lambda: BuildSpec(Source(path=Path(".")), command="true", artifact="/abs"),
        lambda: BuildSpec(Source(path=Path(".")), command="true", artifact=None, env={"A=B": ""}),
    ],
)
def test_inconsistent_specs_are_config_errors(make: Callable[[], object]) -> None:
    with pytest.raises(ConfigError):
        make()


def test_describe_names_the_commit_and_the_revision(repo: Path) -> None:
    sha = git(repo, "rev-parse", "HEAD")
    assert Source(repo=repo, rev="main").describe() == f"git {sha[:8]} (main)"
    assert Source(repo=repo, rev=sha[:10]).describe() == f"git {sha[:8]}"
    assert Source(repo=repo, rev="nope").describe() == "git nope (unresolved)"
    assert Source(path=repo).describe() == f"path {repo}"


def test_a_crashed_builds_leftovers_are_cleared_and_never_look_complete(
    repo: Path, counter: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    spec = app_spec(Source(repo=repo, rev="main"), counter)
    leftover = write(cache / f".tmp-{build_key(spec)}-crashed" / "out" / "app", "half")

    result = build(spec, cache)
    assert not result.cached and runs(counter) == 1
    assert result.artifact.read_text() == "hello\n"
    assert not leftover.exists()


def test_a_cache_inside_the_source_folder_must_be_ignored(repo: Path, tmp_path: Path) -> None:
    spec = BuildSpec(Source(path=repo), command=None, artifact="greeting.txt")
    with pytest.raises(ConfigError, match="inside the source folder"):
        build(spec, repo / "builds")
    # Under .hairline/ (the default state folder) or an ignored folder, it is not content.
    assert build(spec, repo / ".hairline" / "builds").artifact.read_text() == "hello\n"
    assert build(spec, repo / "target" / "builds").cached is False


def test_a_background_process_holding_the_output_does_not_stall_the_build(
    repo: Path, tmp_path: Path
) -> None:
    """False failure: about 1e-6: an echo must finish within 10 s."""
    spec = BuildSpec(
        Source(path=repo), command="(sleep 30 &); echo started", artifact="greeting.txt"
    )
    started = time.monotonic()
    result = build(spec, tmp_path / "cache")
    assert time.monotonic() - started < 10
    assert result.log is not None and "started" in result.log.read_text()


def test_folder_symlinks_are_content_and_are_copied_as_links(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    write(root / "real.txt", "data\n")
    (root / "link.txt").symlink_to("real.txt")
    before = tree_hash(Source(path=root))
    spec = BuildSpec(Source(path=root), command=None, artifact=None)
    tree = build(spec, tmp_path / "cache").artifact
    assert (tree / "link.txt").is_symlink() and (tree / "link.txt").read_text() == "data\n"

    (root / "link.txt").unlink()
    (root / "link.txt").symlink_to("elsewhere.txt")
    assert tree_hash(Source(path=root)) != before
