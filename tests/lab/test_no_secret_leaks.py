"""The database password never leaves the file it is kept in (issue #28, "secrets off the
command line"): a real lab on PostgreSQL whose URL, password included, is in the 0600 file
``HAIRLINE_DB_FILE`` names. While an experiment runs, no process of the machine has it on
its command line (what ``ps`` shows); afterwards, no command's output, JSON event, report
or file under the lab's home holds it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from experiment_files import write_experiment

from schema_check import check_schema

HAIRLINE = [sys.executable, "-c", "from hairline.cli import main; main()"]


def command_lines_with(needle: bytes) -> list[str]:
    """Every live process whose command line holds ``needle`` (as ``ps -ef`` would show)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if needle in cmdline:
                found.append(cmdline.replace(b"\0", b" ").decode(errors="replace"))
    return found


@pytest.mark.shares_cpus
@pytest.mark.slow
def test_the_database_password_is_in_no_command_line_output_event_or_file(
    postgres_server: object, engine_path: Path, tmp_path: Path
) -> None:
    """False failure: none from timing: the run's verdict is not checked, and the command
    lines are read every 20 ms for as long as it runs (the check can only miss a leak, never
    invent one). It runs beside another test (shares_cpus): the password is this test's own."""
    password = "Hl-" + os.urandom(8).hex()
    url = postgres_server.new_database()  # type: ignore[attr-defined]
    secret_url = url.replace("postgres@", f"postgres:{password}@", 1)
    db_file = tmp_path / "db-url"
    db_file.write_text(secret_url + "\n")
    db_file.chmod(0o600)
    env = {**os.environ, "HAIRLINE_ENGINE": str(engine_path), "HAIRLINE_DB_FILE": str(db_file)}
    for name in ("HAIRLINE_DB", "GITHUB_STEP_SUMMARY"):
        env.pop(name, None)
    home = tmp_path / "home"
    exp = write_experiment(tmp_path / "exp", tag="secret", design={"trials": 2})
    outputs = tmp_path / "out"
    outputs.mkdir()

    seen: list[str] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.extend(command_lines_with(password.encode()))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        run = subprocess.run(
            [*HAIRLINE, "run", str(exp.path), "--home", str(home), "--progress", "json",
             "--json", str(outputs / "run.json"), "--markdown", str(outputs / "run.md"),
             "--junit", str(outputs / "run.xml")],
            capture_output=True, text=True, timeout=300, env=env,
        )  # fmt: skip
    finally:
        done.set()
        watcher.join()
    assert run.returncode in (0, 1), run.stdout + run.stderr
    others = [
        subprocess.run(
            [*HAIRLINE, *args, "--home", str(home)],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        for args in (["status"], ["report", "1", "--json", "-"], ["lab", "process", "--once"])
    ]
    status, report, process = others
    assert status.returncode == 0 and process.returncode == 0, (status.stderr, process.stderr)
    assert report.returncode in (0, 1), report.stderr  # 1: the A/B flagged something
    # The documents a real run on PostgreSQL wrote, each against its schema.
    check_schema("experiment-report", json.loads((outputs / "run.json").read_text()))
    check_schema("experiment-report", json.loads(report.stdout))
    events = [json.loads(line) for line in run.stderr.splitlines() if line.startswith("{")]
    assert {"queued", "phase", "trial", "batch", "done"} <= {e["event"] for e in events}
    for event in events:
        check_schema("progress-event", event)

    assert seen == []
    texts = {"run": run.stdout + run.stderr}
    texts.update({f"other {i}": o.stdout + o.stderr for i, o in enumerate(others)})
    for path in [*outputs.rglob("*"), *home.rglob("*")]:
        if path.is_file():
            texts[str(path)] = path.read_bytes().decode(errors="replace")
    assert "postgresql" in texts["run"]  # the URL is named, without its password
    leaks = [where for where, text in texts.items() if password in text]
    assert leaks == []
