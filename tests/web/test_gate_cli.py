"""``hairline gate``: a CI job blocks on an experiment's answer, over HTTP or from the
lab's database, and exits as ``hairline run`` does (0 pass, 1 fail, 2 error, 3 pending).

It lives beside the API's tests because it needs their served lab (``web_lab``)."""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema
from weblab import HAIRLINE, WebLab

from hairline.web.gatewait import GateAnswer, exit_status, wait_for_gate

SCHEMA = Path(__file__).parents[2] / "docs" / "schema" / "junit.xsd"


def gate(*args: str, token: str | None = None, token_file: Path | None = None,
         timeout_s: float = 120) -> subprocess.CompletedProcess[str]:  # fmt: skip
    env = {**os.environ}
    for name in ("GITHUB_STEP_SUMMARY", "HAIRLINE_TOKEN", "HAIRLINE_TOKEN_FILE", "HAIRLINE_DB"):
        env.pop(name, None)
    if token is not None:
        env["HAIRLINE_TOKEN"] = token
    if token_file is not None:
        env["HAIRLINE_TOKEN_FILE"] = str(token_file)
    return subprocess.run([*HAIRLINE, "gate", *args], capture_output=True, text=True,
                          timeout=timeout_s, env=env)  # fmt: skip


@pytest.mark.slow
def test_gate_wait_over_http_exits_1_for_the_regression_and_0_for_the_aa(
    web_lab: WebLab, web_runs: dict[str, int], tmp_path: Path
) -> None:
    """False failure: at most about 1e-3 through the session's web_runs
    (tests/web/conftest.py): the A/A at alpha 0.0001 on its seven deciding metrics fails its
    gate in at most 7e-4 of runs where the model is calibrated (a union bound), and the 30%
    regression (in a duet it reads +19% to +20%, one batch a trial) over 4 trials at
    1,500/s is about eight times its interval's half-width (about 2%: per-trial spreads of
    1.4-1.6 points, three runs on 2026-11-29) past the 2% threshold."""
    token = web_lab.tokens["demo-read"]
    markdown, junit = tmp_path / "gate.md", tmp_path / "gate.xml"
    failed = gate(str(web_runs["regression"]), "--wait", "--timeout-s", "60", "--url",
                  web_lab.url, "--markdown", str(markdown), "--junit", str(junit),
                  token=token)  # fmt: skip
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert f"experiment {web_runs['regression']}: fail" in failed.stdout
    assert "cpu_ns_per_request" in markdown.read_text()
    # The server's JUnit (GET .../report.xml), as the gate judged it: the regression fails.
    xmlschema.validate(str(junit), str(SCHEMA))
    failing = {c.get("name") for c in ET.parse(junit).findall(".//testcase[failure]")}
    assert "cpu_ns_per_request" in failing

    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    passed = gate(str(web_runs["aa"]), "--wait", "--url", web_lab.url, token_file=token_file)
    assert passed.returncode == 0, passed.stdout + passed.stderr


@pytest.mark.slow
def test_gate_reads_the_local_database_without_url(
    web_lab: WebLab, web_runs: dict[str, int]
) -> None:
    """False failure: at most about 1e-3 through the session's web_runs: the same A/A and A/B
    as test_gate_wait_over_http_exits_1_for_the_regression_and_0_for_the_aa."""
    where = ["--db", web_lab.db_url, "--home", str(web_lab.home)]
    assert gate(str(web_runs["regression"]), *where).returncode == 1
    passed = gate(str(web_runs["aa"]), *where, "--junit", "-")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    # --junit - : the document on stdout after the answer's line, valid, nothing failing.
    xml = passed.stdout[passed.stdout.index("<?xml") :]
    xmlschema.validate(xml, str(SCHEMA))
    assert ET.fromstring(xml).get("failures") == "0"


def test_gate_over_http_without_a_token_or_for_another_team_is_an_error(
    web_lab: WebLab,
) -> None:
    missing = gate("1", "--url", web_lab.url)
    assert missing.returncode == 2 and "HAIRLINE_TOKEN" in missing.stderr
    nowhere = gate("999999", "--url", web_lab.url, token=web_lab.tokens["demo-read"])
    assert nowhere.returncode == 2 and "answered 404" in nowhere.stderr


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now_s += seconds


def test_waiting_follows_retry_after_until_an_answer() -> None:
    answers = iter([GateAnswer("pending", "running", 5.0), GateAnswer("pending", "running", 0.1),
                    GateAnswer("fail", "1 regression(s)")])  # fmt: skip
    clock = FakeClock()
    got = wait_for_gate(lambda: next(answers), wait=True, timeout_s=60, clock=clock,
                        sleep=clock.sleep)  # fmt: skip
    assert got.answer == "fail" and exit_status(got.answer) == 1
    assert clock.slept == [5.0, 0.5]  # a tiny Retry-After is not a busy loop


def test_waiting_gives_up_at_the_timeout_with_exit_3() -> None:
    clock = FakeClock()
    got = wait_for_gate(lambda: GateAnswer("pending", "queued", 30.0), wait=True,
                        timeout_s=45, clock=clock, sleep=clock.sleep)  # fmt: skip
    assert got.answer == "pending" and exit_status(got.answer) == 3
    assert clock.now_s == 45 and clock.slept == [30.0, 15.0]


def test_without_wait_a_pending_answer_is_given_at_once() -> None:
    clock = FakeClock()
    got = wait_for_gate(lambda: GateAnswer("pending", "queued", 5.0), wait=False,
                        timeout_s=60, clock=clock, sleep=clock.sleep)  # fmt: skip
    assert got.answer == "pending" and clock.slept == []
