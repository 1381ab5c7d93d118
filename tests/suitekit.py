"""What the tests share besides fixtures: the sample service's handle, the PostgreSQL
server and Ray cluster the session fixtures start, the suite's two parts and the check that
nothing is left behind. tests/conftest.py's fixtures are built on it.

Tests import these from here, never from ``conftest``: that name is every folder's
conftest.py, and a partial run that collected tests/web first found tests/web/conftest.py
under it (``from suitekit import live_processes_with`` failed).
"""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Protocol

import pytest

from hairline import engine
from hairline.errors import EngineError
from hairline.kit.procs import stop_process

if TYPE_CHECKING:
    pass

ENGINE_NAME = "hairline-engine"
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
LISTENING = re.compile(r"^listening on (?P<host>.+):(?P<port>\d+)$")
# One Prometheus sample line: name{labels} value (labels optional).
_METRIC_LINE = re.compile(r"^(?P<series>[a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?)\s+(?P<value>\S+)$")


def find_engine() -> Path | None:
    """The engine binary as hairline finds it ($HAIRLINE_ENGINE, beside Python, PATH)."""
    try:
        return engine.find_engine()
    except EngineError:
        return None


@dataclass
class SampleService:
    """One running ``hairline-engine sample-service``."""

    proc: subprocess.Popen[str]
    port: int
    host: str = "127.0.0.1"
    _stderr: IO[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def get(self, path: str, *, headers: dict[str, str] | None = None) -> tuple[int, str]:
        """GET a path; returns (status, body) for any status, 4xx and 5xx included."""
        request = urllib.request.Request(self.url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=10) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def metrics(self) -> dict[str, float]:
        """/metrics as {series: value}, e.g. {"sample_warm": 1.0}."""
        status, body = self.get("/metrics")
        assert status == 200, f"/metrics answered {status}"
        return parse_prometheus(body)

    def stderr_text(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def stop(self) -> int:
        """SIGTERM, then SIGKILL if it does not exit in time; returns the exit status."""
        return stop_process(self.proc, grace_s=STOP_TIMEOUT_S)


def parse_prometheus(text: str) -> dict[str, float]:
    """Prometheus text format to {series: value}; raises ValueError on a malformed line."""
    samples: dict[str, float] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line or line.startswith("#"):
            continue
        match = _METRIC_LINE.match(line)
        if match is None:
            raise ValueError(f"/metrics line {number} is not a Prometheus sample: {line!r}")
        samples[match["series"]] = float(match["value"])
    return samples


class StartSampleService(Protocol):
    def __call__(self, *extra_args: str, warmup_s: float = 0.0) -> SampleService: ...


def read_first_line(proc: subprocess.Popen[str], timeout_s: float) -> str | None:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    return proc.stdout.readline().strip() if ready else None


def wait_healthy(service: SampleService, deadline: float) -> None:
    last_error = "no answer yet"
    while time.monotonic() < deadline:
        if service.proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(f"{service.url}/healthz", timeout=1) as resp:
                if resp.status == 200:
                    return
                last_error = f"status {resp.status}"
        except (urllib.error.URLError, OSError) as err:
            last_error = str(err)
        time.sleep(0.02)
    service.stop()
    pytest.fail(
        f"sample service on {service.url} did not answer /healthz within "
        f"{START_TIMEOUT_S:.0f} s (last: {last_error}); stderr:\n{service.stderr_text()}",
        pytrace=False,
    )


# --------------------------------------------------------------------------------------
# Databases: every store and lab test runs on SQLite and on a real PostgreSQL server.
# --------------------------------------------------------------------------------------


def pg_bindir() -> Path | None:
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (candidate / "initdb").exists():
            return candidate
    return None


@dataclass
class PostgresServer:
    port: int
    data: Path
    proc: subprocess.Popen[bytes]
    created: int = 0

    def new_database(self) -> str:
        import psycopg

        self.created += 1
        name = f"hairline_test_{self.created}"
        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"


def live_processes_with(marker: str) -> list[int]:
    """Pids of running (not zombie) processes whose command line holds ``marker``: how the
    tests find a daemon an arm left, whatever session or process group it is in."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if marker in cmdline and state != "Z":
                found.append(int(entry.name))
    return found


# --------------------------------------------------------------------------------------
# A Ray cluster on this one machine: the ray backend's tests (tests/lab/test_ray_e2e.py).
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RayWorker:
    """A worker node on a loopback address of its own: a test machine with one host on
    ``cpus``, Ray's daemons on ``housekeeping`` (a 2-CPU machine has no CPU to spare for
    them, so each node's daemons run on the other CPU than its host's)."""

    ip: str
    cpus: str
    housekeeping: str
    # The one fact the agent takes from its operator rather than the machine: every node
    # here is the same machine, so a node of another class differs in this alone.
    server_type: str = "test-vm"


RAY_WORKERS = {
    "w2": RayWorker("127.0.0.2", "0", "1"),
    "w3": RayWorker("127.0.0.3", "1", "0"),
    # Started when a test needs it: a third host of the class (three-sided experiments,
    # the spare a lost host's trial moves to) ...
    "w4": RayWorker("127.0.0.4", "0", "1"),
    # ... and a host of another class, for hardware mode.
    "w5": RayWorker("127.0.0.5", "1", "0", server_type="test-vm-b"),
    # A fourth host of the class: with w2, w3 and w4, two host pairs side by side
    # (tests/lab/test_ray_hostpairs.py, which stops it again).
    "w6": RayWorker("127.0.0.6", "1", "0"),
    # A pair whose tests start them with an environment of their own (perf missing on the
    # node: tests/lab/test_ray_profiling.py, which stops them again).
    "w7": RayWorker("127.0.0.7", "0", "1"),
    "w8": RayWorker("127.0.0.8", "1", "0"),
}


@dataclass
class RayCluster:
    """A head on 127.0.0.1 and worker nodes started with ``hairline agent start``, their
    hosts registered in ``db_url`` (a PostgreSQL database of the session)."""

    root: Path
    port: int
    db_url: str
    env: dict[str, str]
    workers: list[str] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def hairline(self, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", "from hairline.cli import main; main()", *args],
            capture_output=True, text=True, timeout=timeout_s, env=self.env,
        )  # fmt: skip

    def _checked(self, *args: str) -> str:
        done = self.hairline(*args)
        if done.returncode != 0:
            pytest.fail(f"hairline {' '.join(args)}:\n{done.stdout}{done.stderr}", pytrace=False)
        return done.stdout

    def start_head(self) -> None:
        self._checked(
            "agent", "start", "--head", "--port", str(self.port), "--node-ip", "127.0.0.1",
            "--housekeeping-cpus", "0", "--home", str(self.root / "agents"),
            "--ray-temp-dir", str(self.root / "head"),
        )  # fmt: skip

    def _worker_args(self, name: str) -> list[str]:
        node = RAY_WORKERS[name]
        return [
            "agent", "start", "--address", self.address, "--name", name, "--node-ip", node.ip,
            "--cpus", node.cpus, "--housekeeping-cpus", node.housekeeping, "--region", "lab",
            "--server-type", node.server_type, "--home", str(self.root / "agents"),
            "--ray-temp-dir", str(self.root / name),
        ]  # fmt: skip

    def start_worker(self, name: str) -> str:
        """Start (or restart) a worker node; its `agent start` output."""
        out = self._checked(*self._worker_args(name))
        if name not in self.workers:
            self.workers.append(name)
        return out

    def start_workers(self, names: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        """Start worker nodes side by side: each `agent start` waits seconds on its node
        and its registration, one after another they took most of the cluster's start.
        ``env``: variables the nodes (and so their agents) get besides the cluster's."""
        self._all_checked([self._worker_args(name) for name in names], env=env)
        self.workers.extend(n for n in names if n not in self.workers)

    def ensure_workers(self, *names: str) -> None:
        """Start the worker nodes the session has not started yet, side by side (they stay
        for the rest of the session, as w2 and w3 do)."""
        if missing := [name for name in names if name not in self.workers]:
            self.start_workers(missing)

    def _stop_args(self, name: str) -> list[str]:
        what = ["--head"] if name == "head" else ["--name", name]
        return ["agent", "stop", *what, "--force", "--home", str(self.root / "agents")]

    def stop(self, name: str) -> None:
        self.hairline(*self._stop_args(name))

    def stop_all(self) -> None:
        """Stop every node side by side (a forced stop waits on nothing of the others)."""
        for proc in [self._popen(self._stop_args(n)) for n in [*self.workers, "head"]]:
            proc.communicate(timeout=120)

    def restart_all(self, workers: Sequence[str] = ("w2", "w3")) -> None:
        """Stop every node, then start the head and ``workers`` (the session's two by
        default: a spare a test started is not needed again, and each start costs seconds)."""
        self.stop_all()
        self.workers = []
        self.start_head()
        self.start_workers(list(workers))

    def _popen(
        self, args: Sequence[str], env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-c", "from hairline.cli import main; main()", *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**self.env, **(env or {})},
        )  # fmt: skip

    def _all_checked(
        self, commands: Sequence[Sequence[str]], env: Mapping[str, str] | None = None
    ) -> None:
        procs = [(args, self._popen(args, env)) for args in commands]
        failed = []
        for args, proc in procs:
            out = proc.communicate(timeout=120)[0]
            if proc.returncode != 0:
                failed.append(f"hairline {' '.join(args)}:\n{out}")
        if failed:
            pytest.fail("\n".join(failed), pytrace=False)


# --- a git repository a test writes commits into (tests/suggest) ---------------------------

Commit = Callable[[Mapping[str, str | None]], str]


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` as a fixed author, whatever GIT_* this process has."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com")  # fmt: skip
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          env=env, check=True)  # fmt: skip
    return done.stdout.strip()


# --- the order of the suite: quiet machine first -------------------------------------------

# Session fixtures that keep daemons running once started. An idle Ray cluster (a head and
# two to four nodes: GCS, raylets, their workers) keeps waking up on both CPUs; started by
# the first test that needs it, it would stay for the rest of the session beside every
# timing test after that. So their tests run last, Ray's after the HAProxy fleet's, and
# everything else, the timing tests among them, runs before either is started.
_NOISY_SESSION_FIXTURES = ("kraken_fleet", "ray_cluster")


def suite_order_key(fixturenames: Sequence[str]) -> tuple[bool, ...]:
    """Where a test goes in the session: after every test that needs fewer of the noisy
    session fixtures (a stable sort keeps the file order within each group)."""
    return tuple(name in fixturenames for name in reversed(_NOISY_SESSION_FIXTURES))


# --- two parts: what may share the CPUs, and what must have them to itself ---------------

# Fixtures whose tests start services, load generators or clusters: they time things, or
# run beside tests that do.
_TIMING_FIXTURES = frozenset({"engine_path", *_NOISY_SESSION_FIXTURES})
# Folders and files whose tests measure time, CPU or rates without those fixtures (bounds on
# a stop, a start, a CPU reading, a CLI run's wall time).
_TIMING_PATHS = (
    "tests/arms/",
    "tests/bench/",
    "tests/collect/",
    "tests/engine/",
    "tests/kraken/",
    "tests/routing/",
    "tests/hosts/test_node.py",
    "tests/lab/test_capacity_pid.py",
    "tests/store/test_db.py",
)
SUITE_PARTS = ("all", "shared", "alone")


def runs_alone(
    path: str, fixturenames: Sequence[str], slow: bool, shares_cpus: bool = False
) -> bool:
    """Whether a test needs the machine to itself: it is slow (the slow ones measure), uses a
    fixture that starts what times things, or lies where tests measure time. The rest check
    logic (seeded simulations, parsers, the database, the CLI's errors) and may run two at
    once, one per CPU.

    ``shares_cpus`` (the ``shares_cpus`` marker) lets a test that starts real services run
    beside another all the same, because nothing it asserts can be moved by a neighbour (its
    docstring says why: no verdict is checked and its deadlines are tens of times the run,
    or its effect is many times any spread a neighbour adds). Not a test of the Ray cluster
    or the HAProxy fleet: those kill nodes mid-trial and race the run, and shared they
    failed three times in four (2026-11-29: the kill came after the trial, a trial never
    came), and a cluster per worker would start twice."""
    noisy = bool(set(_NOISY_SESSION_FIXTURES).intersection(fixturenames))
    if shares_cpus and not noisy:
        return False
    return (
        slow or bool(_TIMING_FIXTURES.intersection(fixturenames)) or path.startswith(_TIMING_PATHS)
    )


def shared_order_key(shares_cpus: bool) -> bool:
    """Where a test goes in the shared part: the long ones that start services first, since
    xdist deals the tests in this order and a long one dealt last runs while the other worker
    idles."""
    return not shares_cpus


# --- nothing left behind: a session that leaves an arm cgroup or a namespace fails ---------


def hairline_leftovers(cgroup_root: Path = Path("/sys/fs/cgroup")) -> set[str]:
    """The arm cgroups (every hierarchy, v1 or v2) and network namespaces on this machine:
    each test checks its own, and this catches what falls between them (two empty arm
    cgroups were found after full runs that passed)."""
    found = {str(d) for d in cgroup_root.glob("*/hairline/*") if d.is_dir()}
    found |= {str(d) for d in cgroup_root.glob("hairline/*") if d.is_dir()}
    # A v1 hierarchy the lab reaches below its own cgroup (memory/process_api/<id>/ here).
    found |= {str(d) for d in cgroup_root.glob("*/*/*/hairline/*") if d.is_dir()}
    netns = Path("/run/netns")
    if netns.is_dir():
        found |= {str(p) for p in netns.iterdir()}
    return found
