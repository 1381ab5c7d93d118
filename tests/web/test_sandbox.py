"""A hostile submission: its build, and then its arms, run by the lab's processor, try to
get out of their folders, and every attempt fails (lab/build/sandbox.py, arms/sandbox.py)."""

from __future__ import annotations

import hashlib
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from weblab import SERVICE, WebLab, experiment_toml, service_toml, submission, wait_ended

from hairline.store.db import open_store
from hairline.store.models import Experiment

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (make sysdeps installs it)"
)

# Each attempt prints "denied: ..." when it fails and "ESCAPED: ..." when it works; the
# build fails in any case, as a hostile build would once it has what it came for.
MAKEFILE = """\
attempt = if sh -c '$(2)' >/dev/null 2>&1; then echo "ESCAPED: $(1)"; else echo "denied: $(1)"; fi

all:
\t@$(call attempt,read the lab database,cat {db} > stolen.db && test -s stolen.db)
\t@$(call attempt,read the processor's home,ls -A /root | grep -q .)
\t@$(call attempt,write outside its folder,touch {canary})
\t@$(call attempt,reach a non-loopback address,python3 connect.py {address} {port} 3)
\t@$(call attempt,reach the lab's API on loopback,python3 connect.py 127.0.0.1 {api_port} 3)
\t@$(call attempt,fork without limit,for i in $$(seq 2000); do sleep 30 & done; wait)
\t@echo "attempts done"; exit 1
"""
CONNECT = """\
import socket, sys
socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
"""


def outside_address() -> str:
    """An address of this machine that is not loopback (a build may reach nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))  # sends nothing: picks the outgoing interface
        address = str(s.getsockname()[0])
    if address.startswith("127."):
        pytest.skip("this machine has no non-loopback address")
    return address


@pytest.fixture
def listener() -> Iterator[tuple[str, int, list[str]]]:
    """A TCP server on a non-loopback address of this machine, and who connected to it."""
    address = outside_address()
    server = socket.create_server((address, 0))
    server.settimeout(0.2)
    accepted: list[str] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, peer = server.accept()
            except TimeoutError:
                continue
            accepted.append(str(peer))
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield address, server.getsockname()[1], accepted
    finally:
        stop.set()
        thread.join()
        server.close()


# The arm's version: the registered start command runs the submission's serve.sh, which
# tries, then serves (the lab's engine, which the sandbox offers, as the sample service).
SERVE = """\
attempt() { if sh -c "$2" >/dev/null 2>&1; then echo "ESCAPED: $1"; else echo "denied: $1"; fi; }
here=$(cd "$(dirname "$0")" && pwd)
attempt "read the lab database" "cat DB > /tmp/stolen.db && test -s /tmp/stolen.db"
attempt "read the processor's home" "ls -A /root | grep -q ."
attempt "write outside its folder" "touch CANARY"
attempt "reach a non-loopback address" "python3 $here/connect.py ADDRESS PORT 1"
attempt "reach the lab's API on loopback" "python3 $here/connect.py 127.0.0.1 API_PORT 1"
attempt "find the database URL in its environment" "env | grep -q HAIRLINE_DB"
attempt "fork without limit" "for i in \\$(seq 1100); do sleep 1 & done; wait"
sleep 1.5  # the forks' sleeps end before the service starts its threads
echo "attempts done"
exec "$@"
"""
ARM_ATTEMPTS = (
    "read the lab database",
    "read the processor's home",
    "write outside its folder",
    "reach a non-loopback address",
    "reach the lab's API on loopback",
    "find the database URL in its environment",
    "fork without limit",
)
HOSTILE_START = (
    "sh {artifact}/serve.sh {engine} sample-service --host {host} --port {port} --warmup-s 0.2"
)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_hostile_build_gets_nothing_the_experiment_fails_and_the_lab_runs_on(
    web_lab: WebLab, tmp_path: Path, listener: tuple[str, int, list[str]]
) -> None:
    """False failure: about 1e-6: the attempts fail at once (no file, no network, no fork
    past 512), and the build's 3 s connects time out only if the sandbox leaked; the wait
    for the experiment's end is 420 s where it takes seconds."""
    address, port, accepted = listener
    canary = tmp_path / "outside" / "written-by-the-build"
    canary.parent.mkdir()
    db = web_lab.home / "hairline.db"
    makefile = MAKEFILE.format(db=db, canary=canary, address=address, port=port,
                               api_port=web_lab.url.rsplit(":", 1)[1])  # fmt: skip
    status, answer, _ = web_lab.request(
        "POST", f"/api/v1/services/{SERVICE}/commands", token="admin",
        body={"kind": "build", "command": "make"},
    )  # fmt: skip
    assert status in (200, 201), answer
    body = submission(
        experiment_toml(b_args='path = "."').replace("[arms.A]\n", '[arms.A]\npath = "."\n'),
        service=service_toml(extra='[service.build]\ncommand = "make"\nartifact = "app"\n'),
        Makefile=makefile,
        **{"connect.py": CONNECT},
    )
    status, answer, _ = web_lab.request(
        "POST", "/api/v1/experiments", token="demo-submit", body=body
    )
    assert status == 201, answer
    experiment_id = int(answer["id"])

    assert wait_ended(web_lab, experiment_id) == "error"
    store = open_store(web_lab.db_url, home=web_lab.home)
    try:
        with store.transaction() as session:
            row = session.get(Experiment, experiment_id)
            assert row is not None
            phase, failure = row.phase, row.failure or ""
    finally:
        store.close()
    assert phase == "failed", failure
    assert "build of" in failure and "exit status" in failure, failure
    [log] = (web_lab.home / "builds" / "failed").glob("*.log")
    text = log.read_text()
    assert "attempts done" in text, text
    assert "ESCAPED" not in text, text
    for attempt in ("read the lab database", "read the processor's home",
                    "write outside its folder", "reach a non-loopback address",
                    "reach the lab's API on loopback", "fork without limit"):  # fmt: skip
        assert f"denied: {attempt}" in text, text
    assert not canary.exists() and accepted == []
    assert not list(web_lab.home.rglob("stolen.db"))  # a failed build's folder is gone

    # The lab runs on: the server answers, and the processor took the experiment to its end
    # and is still there for the next (its log has no traceback).
    status, _, _ = web_lab.request("GET", "/healthz")
    assert status == 200
    assert "Traceback" not in (web_lab.home / "lab.log").read_text()
    assert db.exists() and digest(db)  # readable by the lab, not by the build


def test_a_hostile_arm_gets_nothing_and_the_experiment_runs_to_its_end(
    web_lab: WebLab, tmp_path: Path, listener: tuple[str, int, list[str]]
) -> None:
    """False failure: about 1e-6: each attempt fails at once (no such file, a read-only
    mount, a namespace with no route out, no fork past 1,024) or its 1 s connect times out;
    an arm is healthy about 4 s after it starts, against the file's 30 s; one trial, the
    verdict not checked."""
    address, port, accepted = listener
    canary = tmp_path / "outside" / "written-by-an-arm"
    canary.parent.mkdir()
    service = "sample-sandboxed"
    for kind, command in (("build", "make"), ("start", HOSTILE_START)):
        status, answer, _ = web_lab.request(
            "POST", f"/api/v1/services/{service}/commands", token="admin",
            body={"kind": kind, "command": command},
        )  # fmt: skip
        assert status in (200, 201), answer
    serve = (SERVE.replace("DB", str(web_lab.home / "hairline.db")).replace("CANARY", str(canary))
             .replace("ADDRESS", address).replace("API_PORT", web_lab.url.rsplit(":", 1)[1])
             .replace("PORT", str(port)))  # fmt: skip
    build = '[service.build]\ncommand = "make"\nartifact = "app"\n'
    service_file = service_toml(HOSTILE_START, name=service, extra=build)
    body = submission(
        experiment_toml(trials=1)
        .replace("[arms.A]\n", '[arms.A]\npath = "."\n')
        .replace("[arms.B]\n", '[arms.B]\npath = "."\n'),
        service=service_file.replace("health_timeout_s = 10", "health_timeout_s = 30"),
        Makefile="all:\n\tmkdir -p app && cp serve.sh connect.py app/\n",
        **{"serve.sh": serve, "connect.py": CONNECT},
    )
    status, answer, _ = web_lab.request(
        "POST", "/api/v1/experiments", token="demo-submit", body=body
    )
    assert status == 201, answer
    experiment_id = int(answer["id"])

    wait_ended(web_lab, experiment_id)
    store = open_store(web_lab.db_url, home=web_lab.home)
    try:
        with store.transaction() as session:
            row = session.get(Experiment, experiment_id)
            assert row is not None
            phase, failure, artifacts = row.phase, row.failure, Path(row.artifacts_dir)
    finally:
        store.close()
    assert phase == "done", failure
    logs = [p.read_text() for p in (artifacts / "runs").glob("*.log")]
    started = [text for text in logs if "attempts done" in text]
    assert len(started) >= 2, logs  # two arms (a batch run again adds more)
    for text in started:
        assert "ESCAPED" not in text, text
        for attempt in ARM_ATTEMPTS:
            assert f"denied: {attempt}" in text, text
    assert not canary.exists() and accepted == []
    status, _, _ = web_lab.request("GET", "/healthz")
    assert status == 200
