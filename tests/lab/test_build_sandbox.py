"""A submitted experiment's build in its sandbox (lab/build/sandbox.py), with real bubblewrap
and real cgroups. The hostile submission end to end is tests/web/test_sandbox.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hairline.errors import BuildFailed
from hairline.lab.build import BuildSandbox, BuildSpec, Source, build, build_key
from hairline.lab.build.command import run_command
from hairline.lab.build.sandbox import bwrap_argv

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (make sysdeps installs it)"
)


def test_the_sandbox_binds_its_folder_writable_and_the_system_read_only(tmp_path: Path) -> None:
    (tmp_path / "bin").symlink_to("usr/bin")
    (tmp_path / "lib64").mkdir()
    argv = bwrap_argv("bwrap", "make", Path("/work/x"), root=tmp_path)
    joined = " ".join(argv)
    assert "--ro-bind /usr /usr" in joined and "--symlink usr/bin /bin" in joined
    assert "--ro-bind /lib64 /lib64" in joined
    # Inside at a fixed path: the lab's folders it lies under are not even named there.
    assert "--bind /work/x /build" in joined and "--chdir /build" in joined
    for flag in ("--unshare-net", "--unshare-pid", "--unshare-user", "--die-with-parent"):
        assert flag in argv
    assert argv[argv.index("--uid") + 1] == "65534" and "--remount-ro" in argv
    assert argv[-3:] == ["sh", "-c", "make"]
    # Nothing of the lab, the processor's user or /etc as a whole.
    assert "/root" not in argv and "/home" not in argv and "/etc" not in argv


def test_limits_below_what_a_build_needs_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 8 processes"):
        BuildSandbox(pids_max=2)


def test_a_sandboxed_build_has_its_own_cache_entries(tmp_path: Path) -> None:
    folder = tmp_path / "app"
    folder.mkdir()
    (folder / "main.c").write_text("int main(void) { return 0; }\n")
    plain = BuildSpec(Source(path=folder), command="true", artifact=None)
    sandboxed = BuildSpec(Source(path=folder), command="true", artifact=None,
                          sandbox=BuildSandbox())  # fmt: skip
    assert build_key(plain) != build_key(sandboxed)


@needs_bwrap
def test_a_sandboxed_build_sees_only_its_folder_and_none_of_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGPASSWORD", "s3cret")
    work = tmp_path / "work"
    work.mkdir()
    out = tmp_path / "out.txt"
    status, timed_out = run_command(
        "id -u; pwd; env; ls -A /; touch made-here; cat /etc/hostname", work, {"SHOP": "1"},
        out, 30, None, sandbox=BuildSandbox(),
    )  # fmt: skip
    text = out.read_text()
    assert status != 0 and not timed_out  # /etc/hostname is not there
    assert text.splitlines()[:2] == ["65534", "/build"]
    assert "SHOP=1" in text and "s3cret" not in text and "PGPASSWORD" not in text
    assert (work / "made-here").exists()
    assert "root" not in text.split() and "tmp" in text.split()  # / holds no /root


@needs_bwrap
def test_a_fork_bomb_stops_at_the_process_limit_and_leaves_nothing(tmp_path: Path) -> None:
    """False failure: about 1e-6: 300 sleeps against a limit of 64 fail to fork at once; the
    build's deadline is 30 s."""
    work = tmp_path / "work"
    work.mkdir()
    status, timed_out = run_command(
        "for i in $(seq 300); do sleep 30 & done; wait", work, {}, tmp_path / "out.txt", 30,
        None, sandbox=BuildSandbox(pids_max=64),
    )  # fmt: skip
    assert status != 0 and not timed_out
    assert not list(Path("/sys/fs/cgroup").glob("*/hairline/hlbuild-*"))


@needs_bwrap
def test_a_failed_sandboxed_build_says_so_like_any_other(tmp_path: Path) -> None:
    folder = tmp_path / "app"
    folder.mkdir()
    (folder / "Makefile").write_text("all:\n\tcat /etc/shadow\n")
    spec = BuildSpec(Source(path=folder), command="make", artifact=None, sandbox=BuildSandbox())
    with pytest.raises(BuildFailed, match="exit status") as caught:
        build(spec, tmp_path / "cache")
    assert "No such file or directory" in str(caught.value)


def test_the_build_cgroup_of_a_dead_processor_is_swept_and_a_live_ones_kept() -> None:
    """A SIGKILLed processor skips run_command's clean-up: its build, a hostile one above
    all, runs on in hlbuild-<work>-<pid>. The next sandboxed build (or takeover) removes it.
    False failure: about 1e-6: a sleep must start and the cgroup empty within 5 s."""
    import os
    import subprocess
    import time

    from hairline.arms.cgroup import create_cgroup
    from hairline.kit.procs import child_setup
    from hairline.lab.build.command import sweep_orphaned_builds

    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid names a processor that is no more
    orphan, why = create_cgroup(f"hlbuild-work{os.getpid()}-{gone.pid}")
    if orphan is None:
        pytest.skip(f"no cgroup on this machine: {why}")
    mine, _ = create_cgroup(f"hlbuild-mine{os.getpid()}-{os.getpid()}")
    assert mine is not None
    build = subprocess.Popen(["sleep", "300"], preexec_fn=child_setup(join=orphan.procs_files))
    try:
        deadline = time.monotonic() + 5
        while not orphan.pids() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert sweep_orphaned_builds() == [orphan.name]
        assert build.wait(timeout=5) == -9
        assert all(not d.exists() for d in orphan.dirs.values())
        assert all(d.exists() for d in mine.dirs.values())  # its processor runs: kept
    finally:
        build.kill()
        mine.remove()
        orphan.remove()
