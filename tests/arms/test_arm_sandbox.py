"""A submitted experiment's arm in its sandbox (arms/sandbox.py): a real bubblewrap around a
real server, which answers its health check and gets nothing else of the machine."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from hairline.arms.local import ArmSpec, LocalArm, free_port
from hairline.arms.sandbox import ArmSandbox, sandbox_env, sandboxed_command

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (make sysdeps installs it)"
)

# Each attempt prints "denied: ..." when it fails and "ESCAPED: ..." when it works; then the
# script serves its folder, as a submitted service would once it has what it came for.
SCRIPT = """\
attempt() { if sh -c "$2" >/dev/null 2>&1; then echo "ESCAPED: $1"; else echo "denied: $1"; fi; }
attempt "read the lab's secret" "cat SECRET"
attempt "list the lab's folder" "ls LAB"
attempt "write outside its folder" "touch LAB/written-by-the-arm"
attempt "find the processor's secret in its environment" "env | grep -q HAIRLINE_TEST_SECRET"
attempt "fork without limit" "for i in \\$(seq 200); do sleep 1 & done; wait"
sleep 1.5  # the forks' sleeps end before the server starts its threads
touch ARM/written-in-its-folder && echo "wrote its folder"
echo "attempts done"
exec PYTHON -m http.server PORT --bind 127.0.0.1
"""


def layout(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The lab's folder (a secret in it), the submission's folder, the arm's folder."""
    lab, service, arm = tmp_path / "lab", tmp_path / "service", tmp_path / "arm"
    for folder in (lab, service, arm):
        folder.mkdir()
    (lab / "secret").write_text("the database password")
    (service / "healthz").write_text("ok")
    return lab, service, arm


@needs_bwrap
def test_a_sandboxed_arm_answers_and_gets_nothing_of_the_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """False failure: about 1e-6: each attempt fails at once (no such file, a read-only
    mount, no fork past 64); the health check waits 30 s for a server that starts in one."""
    lab, service, arm_dir = layout(tmp_path)
    monkeypatch.setenv("HAIRLINE_TEST_SECRET", "postgresql://u:password@db/lab")
    port = free_port()
    script = (SCRIPT.replace("SECRET", str(lab / "secret")).replace("LAB", str(lab))
              .replace("ARM", str(arm_dir)).replace("PYTHON", "python3")
              .replace("PORT", str(port)))  # fmt: skip
    (service / "serve.sh").write_text(script)
    sandbox = ArmSandbox(writable=(arm_dir,), readable=(service,), pids_max=64)
    spec = ArmSpec(name="A", command=["sh", str(service / "serve.sh")], cwd=service,
                   sandbox=sandbox)  # fmt: skip
    log = tmp_path / "arm.log"
    arm = LocalArm(spec, port=port, cpus=[0], log_path=log, cgroup=f"hltest-sandbox-{port}")
    with arm.start():
        assert arm.cgroup is not None
        pids_dir = arm.cgroup.dirs["v2" if arm.cgroup.mode == "v2" else "pids"]
        assert (pids_dir / "pids.max").read_text().strip() == "64"
        pids = arm.pids()
        environ = [Path(f"/proc/{pid}/environ").read_bytes() for pid in pids]
    text = log.read_text()
    assert "attempts done" in text and "wrote its folder" in text, text
    assert "ESCAPED" not in text, text
    attempts = ("read the lab's secret", "list the lab's folder", "write outside its folder",
                "find the processor's secret in its environment", "fork without limit")  # fmt: skip
    for attempt in attempts:
        assert f"denied: {attempt}" in text, text
    assert not (lab / "written-by-the-arm").exists()
    assert (arm_dir / "written-in-its-folder").exists()
    assert all(b"HAIRLINE_TEST_SECRET" not in e for e in environ)


def test_only_the_program_is_bound_never_a_path_among_its_arguments(tmp_path: Path) -> None:
    """The arguments come from the submission: binding a path named there would open any
    file of the machine to it."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (make sysdeps installs it)")
    program = tmp_path / "bin" / "server"
    program.parent.mkdir()
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    secret = tmp_path / "secret"
    secret.write_text("x")
    sandbox = ArmSandbox(writable=(tmp_path / "arm",))
    argv = sandboxed_command(sandbox, [str(program), "--config", str(secret)], None, {})
    binds = [argv[i + 1] for i, word in enumerate(argv) if word in ("--ro-bind", "--bind")]
    assert str(program) in binds and str(secret) not in binds
    assert argv[argv.index("--") + 1 :] == [str(program), "--config", str(secret)]
    assert "--unshare-net" not in argv  # the arm answers on the network it is started in


def test_the_environment_keeps_only_harmless_keys_and_the_arms_own() -> None:
    processor = {"PATH": "/usr/bin", "HAIRLINE_DB": "postgresql://u:pw@h/db", "LANG": "C.UTF-8"}
    env = sandbox_env(processor, {"APP_MODE": "fast"})
    assert env == {"PATH": "/usr/bin", "LANG": "C.UTF-8", "APP_MODE": "fast"}


def test_limits_below_what_an_arm_needs_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 8 processes"):
        ArmSandbox(pids_max=2)


def test_without_a_cgroup_a_sandboxed_arm_does_not_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HAIRLINE_CGROUP", "none")
    _, service, arm_dir = layout(tmp_path)
    spec = ArmSpec(name="A", command=["true"], cwd=service,
                   sandbox=ArmSandbox(writable=(arm_dir,)))  # fmt: skip
    port = free_port()
    arm = LocalArm(spec, port=port, cgroup=f"hltest-nocg-{port}")
    with pytest.raises(Exception, match="has no cgroup here") as caught:
        arm.start()
    assert "HAIRLINE_CGROUP=none" in str(getattr(caught.value, "hint", ""))
    assert not os.path.exists(f"/sys/fs/cgroup/hltest-nocg-{port}")
