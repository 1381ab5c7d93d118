"""What hairline's child processes leave behind: a session's live members, read from /proc."""

from __future__ import annotations

import os
import subprocess

from hairline.kit.procs import session_members


def test_a_session_lists_its_live_processes_and_none_once_they_exit() -> None:
    daemon = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        assert session_members(daemon.pid) == [(daemon.pid, "sleep")]
        assert (daemon.pid, "sleep") not in session_members(os.getsid(0))
    finally:
        daemon.kill()
        daemon.wait()
    assert session_members(daemon.pid) == []
