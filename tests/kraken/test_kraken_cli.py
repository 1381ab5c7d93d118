"""``hairline kraken`` as a user runs it: a separate process against the session's fleet,
killed with SIGKILL mid-test (its watchdog restores the weights), and files with mistakes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kraken_files import kraken_file, quiet_health, served_rate_health

from conftest import live_processes_with
from hairline.kraken.fleet import LocalFleet
from hairline.lb.balancer import LoadBalancer
from hairline.lb.haproxy import HAProxyRuntime
from schema_check import check_schema

CONTROL_INTERVAL_S = 1.0


def hairline(*args: str, engine: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", "from hairline.cli import main; main()", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HAIRLINE_ENGINE": str(engine)},
    )


def shifted_run(
    fleet: LocalFleet, engine: Path, folder: Path, *extra: str
) -> tuple[subprocess.Popen[str], dict[str, int]]:
    """`hairline kraken` on the fleet, once it has shifted the weights; and the original."""
    path = kraken_file(folder, fleet, health=quiet_health(folder), per_server=100)
    lb = HAProxyRuntime(fleet.socket_path, fleet.backend)
    original = lb.weights()
    proc = hairline("kraken", str(path), *extra, engine=engine)
    deadline = time.monotonic() + 20
    while lb.weights() == original:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the test never shifted the weights"
        time.sleep(0.05)
    return proc, original


def sigkill_mid_test_and_see_the_weights_restored(
    proc: subprocess.Popen[str], lb: LoadBalancer, original: dict[str, int]
) -> None:
    """Past a control interval (a second shift, mid-test), SIGKILL `hairline kraken`: the
    balancer's weights must be back to ``original`` within two control intervals."""
    try:
        time.sleep(1.2)
        assert lb.weights() != original
        proc.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        proc.wait()
        while lb.weights() != original:
            assert time.monotonic() - killed_at < 2 * CONTROL_INTERVAL_S, lb.weights()
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.communicate()


@pytest.mark.slow
def test_sigkill_of_the_controller_and_the_watchdog_restores_within_two_intervals(
    kraken_fleet: LocalFleet, engine_path: Path, tmp_path: Path
) -> None:
    """False failure: under 1e-4 (not measured): the pipe closes with the killed process and the
    watchdog's restore is one HAProxy command, milliseconds against the bound of 2 control intervals
    (2 s); the weights are already shifted when the 1.2 s sleep starts."""
    lb = HAProxyRuntime(kraken_fleet.socket_path, kraken_fleet.backend)
    proc, original = shifted_run(kraken_fleet, engine_path, tmp_path)
    sigkill_mid_test_and_see_the_weights_restored(proc, lb, original)
    deadline = time.monotonic() + 5
    while live_processes_with("hairline.kraken.watchdog") or live_processes_with(
        f"users={kraken_fleet.frontend_url}"
    ):
        assert time.monotonic() < deadline, "the watchdog or the engine was left running"
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize(
    "documents",
    [
        pytest.param(("--json", "-", "--html", "{folder}/kraken.html"), id="json-to-stdout"),
        pytest.param(("--html", "-", "--json", "{folder}/kraken.json"), id="html-to-stdout"),
    ],
)
def test_sigterm_aborts_restores_and_exits_2_with_the_json(
    kraken_fleet: LocalFleet, engine_path: Path, tmp_path: Path, documents: tuple[str, ...]
) -> None:
    """The reports of an aborted test are written, one of them to stdout (`-`: the document
    alone there, the progress and the summary on stderr).

    False failure: about 1e-5: the shift must come within 20 s and the exit within 30 s, seconds
    each on this machine."""
    args = [a.format(folder=tmp_path) for a in documents]
    proc, original = shifted_run(kraken_fleet, engine_path, tmp_path, *args)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 2, stdout + stderr
    assert HAProxyRuntime(kraken_fleet.socket_path, kraken_fleet.backend).weights() == original
    to_stdout = args[0]
    doc = json.loads(stdout if to_stdout == "--json" else (tmp_path / "kraken.json").read_text())
    html = stdout if to_stdout == "--html" else (tmp_path / "kraken.html").read_text()
    assert html.lstrip().lower().startswith("<!doctype html") and html.rstrip().endswith("</html>")
    check_schema("kraken-report", doc)
    assert doc["aborted"] is True and doc["weights_restored"] is True
    assert doc["stopped_by"] == "interrupted (SIGINT or SIGTERM)"
    assert "aborted" in stderr
    assert not list(Path.cwd().glob("-"))
    assert not live_processes_with("hairline.kraken.watchdog")


def test_a_bad_health_file_is_exit_2_naming_the_field(
    kraken_fleet: LocalFleet, engine_path: Path, tmp_path: Path
) -> None:
    health = served_rate_health(
        tmp_path,
        "BOLD = [0, 10], MODERATE = [5, 15], CAUTIOUS = [15, 18], "
        "NOMORE = [18, 20], BACKOFF = [20, inf]",
    )
    path = kraken_file(tmp_path, kraken_fleet, health=health)
    proc = hairline("kraken", str(path), engine=engine_path)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "level_ranges" in stderr and "served" in stderr
    assert "Traceback" not in stderr


def test_a_file_without_a_socket_asks_for_one_or_a_local_fleet(
    kraken_fleet: LocalFleet, engine_path: Path, tmp_path: Path
) -> None:
    health = served_rate_health(
        tmp_path,
        "BOLD = [0, 10], MODERATE = [10, 15], CAUTIOUS = [15, 18], "
        "NOMORE = [18, 20], BACKOFF = [20, inf]",
    )
    path = kraken_file(tmp_path, kraken_fleet, health=health)
    path.write_text(path.read_text().replace(f'socket = "{kraken_fleet.socket_path}"\n', ""))
    proc = hairline("kraken", str(path), engine=engine_path)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "[lb] socket is missing" in stderr and "--local-fleet" in stderr
