"""`hairline lab process --wait-s`: a processor whose experiments all wait (every host held
by another processor's experiment) exits 3 once they have waited that long, and leaves
them queued; the wait is shown once per experiment and reason, not every round."""

from __future__ import annotations

import re

from click.testing import CliRunner

from hairline.cli import EXIT_WAITING, main
from test_cli_run import HeldLab, held_lab, row  # noqa: F401  (held_lab is a fixture)


def test_a_processor_with_only_waiting_experiments_gives_up_after_wait_s(
    held_lab: HeldLab,  # noqa: F811
) -> None:
    runner = CliRunner()
    queued = runner.invoke(main, ["run", *held_lab.args("--no-process", "--no-wait")])
    assert queued.exit_code == 0, queued.output
    home = ["--home", str(held_lab.home)]
    result = runner.invoke(main, ["lab", "process", *home, "--wait-s", "1", "--poll-s", "0.2"])
    assert result.exit_code == EXIT_WAITING, result.output
    text = " ".join(result.output.split())
    assert text.count("#2: waiting for hosts:") == 1, text
    assert re.search(r"gave up after waiting [12] s with no trial ending: #2 stay queued", text)
    assert row(held_lab.store, 2).lease_owner is None
    # Without --wait-s a processor never gives up; --once still ends after one round.
    once = runner.invoke(main, ["lab", "process", *home, "--once"])
    assert once.exit_code == 0 and "#2: waiting" in once.output, once.output
