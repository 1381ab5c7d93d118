"""Every command and option of the lab's commands, as they were before cli/lab.py was split
into run, experiments, demo and lab: none lost, none renamed (new ones may be added)."""

from __future__ import annotations

import subprocess
import sys

import click
from click.testing import CliRunner

from hairline.cli import main
from hairline.cli._base import load_all_commands

BEFORE_THE_SPLIT = {
    "aa": ["--backend", "--check", "--cpus-per-host", "--db", "--home", "--html", "--json",
           "--lease-s", "--markdown", "--no-process", "--no-wait", "--priority",
           "--ray-address", "FILE"],
    "cancel": ["--db", "--home", "--wait", "EXPERIMENT_ID"],
    "demo": ["--db", "--duration-s", "--home", "--html", "--json", "--markdown", "--rate",
             "--regress-cpu", "--trials"],
    "lab factors": ["--cov-from", "--db", "--home", "--json", "--metric", "--min-runs",
                    "--service"],
    "lab hosts": ["--cpus-per-host", "--db", "--home", "--json"],
    "lab process": ["--backend", "--cpus-per-host", "--db", "--home", "--lease-s", "--once",
                    "--poll-s", "--ray-address"],
    "lab quota": ["--db", "--home", "--region", "MAX_HOSTS", "TEAM"],
    "report": ["--db", "--home", "--html", "--json", "--markdown", "--reanalyse",
               "EXPERIMENT_ID"],
    "run": ["--backend", "--check", "--cpus-per-host", "--db", "--home", "--html", "--json",
            "--lease-s", "--markdown", "--no-process", "--no-wait", "--priority",
            "--ray-address", "FILE"],
    "status": ["--db", "--home", "--json", "EXPERIMENT_ID"],
    "agent start": ["--address", "--cpus", "--db", "--head", "--home", "--housekeeping-cpus",
                    "--json", "--name", "--node-ip", "--port", "--ray-temp-dir", "--region",
                    "--server-type"],
    "agent stop": ["--db", "--force", "--head", "--home", "--json", "--name"],
}  # fmt: skip


def commands(group: click.Group, prefix: str = "") -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found.update(commands(command, f"{prefix}{name} "))
        else:
            found[prefix + name] = {
                "/".join(p.opts) if isinstance(p, click.Option) else str(p.name).upper()
                for p in command.params
            }
    return found


def test_every_command_and_option_of_before_the_split_is_still_there() -> None:
    # Commands register when their module is imported (cli/_base.py's lazy group); alone,
    # this test saw none: it passed only after another test had imported them all.
    load_all_commands()
    now = commands(main)
    for name, options in BEFORE_THE_SPLIT.items():
        assert name in now, f"`hairline {name}` is gone"
        assert set(options) <= now[name], (name, set(options) - now[name])


def test_no_command_imports_scipy_stats_or_scipy_signal() -> None:
    """Either import cost every command 1.5 s of its start (2026-11-28: `hairline status
    --help` 3.6 s, 1.9 s without); hairline's statistics use stats/dist on scipy.special.
    Tuning's searchers (scikit-learn) are the exception: only `hairline tune` loads them."""
    probe = (
        "import sys\n"
        "from hairline.cli._base import COMMAND_MODULES, load_all_commands\n"
        "load_all_commands()\n"
        "import hairline.lab.analysis, hairline.lab.processor, hairline.lab.driver\n"
        "import hairline.report.markdown, hairline.report.html, hairline.web.app\n"
        "print(sorted(m for m in ('scipy.stats', 'scipy.signal') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_every_db_option_refuses_a_password_and_says_where_one_goes() -> None:
    """A password on a command line is in `ps` for every user; each --db says so, and the
    message shows the URL with the password hidden."""
    load_all_commands()
    url = "postgresql://lab:s3cret@db.internal/hairline"
    with_db = [name for name, options in commands(main).items() if "--db" in options]
    assert {"run", "status", "lab process", "agent start", "serve"} <= set(with_db)
    for name in with_db:
        words = [*name.split(), "--db", url]
        result = CliRunner().invoke(main, words)
        assert result.exit_code == 2, (name, result.output)
        assert "--db postgresql://lab:***@db.internal/hairline: a password" in result.output, name
        assert "HAIRLINE_DB_FILE" in result.output and "s3cret" not in result.output, name
