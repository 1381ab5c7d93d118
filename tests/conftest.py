"""Fixtures shared by every test: the engine binary, real sample services on loopback, a
private PostgreSQL server and a Ray cluster of this machine (both one per session).

``sample_service`` is a factory. Each call starts ``hairline-engine sample-service --port 0``,
reads the port it picked from the first line of its stdout, waits until ``/healthz``
answers, and returns a handle. Every service a test started is stopped at teardown, so no
process outlives its test::

    def test_feed_answers(sample_service):
        svc = sample_service("--regress-cpu", "0.05", warmup_s=0.0)
        with urllib.request.urlopen(f"{svc.url}/api/feed?user=7") as resp:
            assert resp.status == 200
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Protocol

import pytest

from hairline import engine
from hairline.errors import EngineError
from hairline.kit.ports import free_port
from hairline.kit.procs import stop_process
from hairline.store.db import Store, open_store

if TYPE_CHECKING:
    from hairline.kraken.fleet import LocalFleet

ENGINE_NAME = "hairline-engine"
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
_LISTENING = re.compile(r"^listening on (?P<host>.+):(?P<port>\d+)$")
# One Prometheus sample line: name{labels} value (labels optional).
_METRIC_LINE = re.compile(r"^(?P<series>[a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?)\s+(?P<value>\S+)$")


def find_engine() -> Path | None:
    """The engine binary as hairline finds it ($HAIRLINE_ENGINE, beside Python, PATH)."""
    try:
        return engine.find_engine()
    except EngineError:
        return None


@pytest.fixture(scope="session")
def engine_path() -> Path:
    path = find_engine()
    if path is None:
        pytest.fail(
            f"{ENGINE_NAME} not found: set HAIRLINE_ENGINE=/path/to/{ENGINE_NAME} "
            "(e.g. target/release/hairline-engine after `cargo build --release`), "
            "or run `make build` to install it into the venv",
            pytrace=False,
        )
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"HAIRLINE_ENGINE={path} is not an executable file", pytrace=False)
    return path


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


def _read_first_line(proc: subprocess.Popen[str], timeout_s: float) -> str | None:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    return proc.stdout.readline().strip() if ready else None


def _wait_healthy(service: SampleService, deadline: float) -> None:
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


@pytest.fixture
def sample_service(engine_path: Path) -> Iterator[StartSampleService]:
    started: list[SampleService] = []

    def start(*extra_args: str, warmup_s: float = 0.0) -> SampleService:
        # Lives as long as the service (closed at teardown), so no `with` block.
        stderr = tempfile.TemporaryFile()  # noqa: SIM115
        command = [
            str(engine_path),
            "sample-service",
            "--port",
            "0",
            "--warmup-s",
            str(warmup_s),
            *map(str, extra_args),
        ]
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        first = _read_first_line(proc, START_TIMEOUT_S)
        match = _LISTENING.match(first or "")
        if match is None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            stderr.seek(0)
            pytest.fail(
                f"`{' '.join(command)}` did not print 'listening on HOST:PORT' "
                f"(first line: {first!r}, exit status: {proc.returncode}); "
                f"stderr:\n{stderr.read().decode(errors='replace')}",
                pytrace=False,
            )
        service = SampleService(
            proc=proc, port=int(match["port"]), host=match["host"], _stderr=stderr
        )
        started.append(service)
        _wait_healthy(service, deadline)
        return service

    yield start
    for service in started:
        service.stop()
        if service._stderr is not None:
            service._stderr.close()


# --------------------------------------------------------------------------------------
# Databases: every store and lab test runs on SQLite and on a real PostgreSQL server.
# --------------------------------------------------------------------------------------


def _pg_bindir() -> Path | None:
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


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A private PostgreSQL cluster on a loopback port, for this test session only."""
    bindir = _pg_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed (make sysdeps installs it)")
    # Not under pytest's temp root: that is private to root, and the cluster may run as
    # another user.
    parent = Path(tempfile.mkdtemp(prefix="hairline-pg-"))
    data = parent / "data"
    as_user: list[str] = []
    if os.geteuid() == 0:
        # initdb refuses to run as root; run the cluster as the postgres system user.
        as_user = ["runuser", "-u", "postgres", "--"]
        import shutil

        shutil.chown(parent, "postgres")
    subprocess.run(
        [*as_user, str(bindir / "initdb"), "-D", str(data), "-U", "postgres",
         "--auth=trust", "-E", "UTF8", "--no-sync"],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    port = free_port()
    proc = subprocess.Popen(
        [*as_user, str(bindir / "postgres"), "-D", str(data), "-p", str(port),
         "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={data}",
         "-c", "fsync=off", "-c", "max_connections=200"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    server = PostgresServer(port=port, data=data, proc=proc)
    deadline = time.monotonic() + 30
    import psycopg

    while True:
        try:
            psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname=postgres").close()
            break
        except psycopg.OperationalError:
            if time.monotonic() > deadline or proc.poll() is not None:
                os.killpg(proc.pid, signal.SIGKILL)
                pytest.fail("the test PostgreSQL server did not start", pytrace=False)
            time.sleep(0.1)
    try:
        yield server
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        subprocess.run(["rm", "-rf", str(parent)], check=False)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database: SQLite in a temp folder, or a new PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'hairline.db'}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.new_database()


@pytest.fixture
def store(db_url: str, tmp_path: Path) -> Iterator[Store]:
    """The lab's database on ``db_url`` (SQLite, then PostgreSQL), its home in tmp_path; a
    module that needs another kind of store defines its own ``store``."""
    s = open_store(db_url, home=tmp_path / "home")
    yield s
    s.close()


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

    def ensure_worker(self, name: str) -> None:
        """Start a worker node the session has not started yet (it stays for the rest of
        the session, as w2 and w3 do)."""
        if name not in self.workers:
            self.start_worker(name)

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


@pytest.fixture(scope="session")
def ray_cluster(postgres_server: PostgresServer, engine_path: Path) -> Iterator[RayCluster]:
    """One Ray cluster for the session (tests restart only the nodes they kill), with
    token authentication on: the token in a file only its owner may read."""
    pytest.importorskip("ray", reason="Ray is not installed (make build installs it)")
    # Ray's socket paths live under the node folders: keep them short.
    root = Path(tempfile.mkdtemp(prefix="hlray-", dir="/tmp"))
    token = root / "token"
    token.write_text(os.urandom(32).hex())
    token.chmod(0o600)
    port = free_port()
    env = {**os.environ, "HAIRLINE_ENGINE": str(engine_path), "RAY_AUTH_MODE": "token",
           "RAY_AUTH_TOKEN_PATH": str(token)}  # fmt: skip
    env.pop("RAY_AUTH_TOKEN", None)
    env.pop("GITHUB_STEP_SUMMARY", None)
    db_url = postgres_server.new_database()
    env["HAIRLINE_DB"] = db_url
    cluster = RayCluster(root=root, port=port, db_url=db_url, env=env)
    try:
        cluster.start_head()
        cluster.start_workers(["w2", "w3"])
        yield cluster
    finally:
        cluster.stop_all()
        subprocess.run(["rm", "-rf", str(root)], check=False)


# --------------------------------------------------------------------------------------
# Kraken: a fleet of sample services behind a real HAProxy (one per session).
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def kraken_fleet(engine_path: Path) -> Iterator[LocalFleet]:
    """``--local-fleet 4``: web1..web4 and "rest" behind HAProxy, sharing a limited cache.
    Tests that change its weights put them back (the controller does, on every path)."""
    from hairline.kraken.fleet import FleetSpec, LocalFleet
    from hairline.lb.launch import HAPROXY

    if not HAPROXY.exists():
        pytest.skip("HAProxy is not installed (make sysdeps installs it)")
    with LocalFleet(FleetSpec(servers=4), engine=engine_path) as fleet:
        yield fleet


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


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    return path


@pytest.fixture
def commit(repo: Path) -> Commit:
    """Write files (None deletes one; "->new/path" moves it) and commit; the commit's id."""

    def make(files: Mapping[str, str | None]) -> str:
        for name, text in files.items():
            path = repo / name
            if text is None:
                git(repo, "rm", "-q", name)
            elif text.startswith("->"):
                (repo / text[2:]).parent.mkdir(parents=True, exist_ok=True)
                git(repo, "mv", name, text[2:])
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
                git(repo, "add", name)
        git(repo, "commit", "-q", "--allow-empty", "-m", "c")
        return git(repo, "rev-parse", "HEAD")

    return make


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


def runs_alone(path: str, fixturenames: Sequence[str], slow: bool) -> bool:
    """Whether a test needs the machine to itself: it is slow (the slow ones measure), uses a
    fixture that starts what times things, or lies where tests measure time. The rest check
    logic (seeded simulations, parsers, the database, the CLI's errors) and may run two at
    once, one per CPU."""
    return (
        slow or bool(_TIMING_FIXTURES.intersection(fixturenames)) or path.startswith(_TIMING_PATHS)
    )


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--suite-part",
        choices=SUITE_PARTS,
        default="all",
        help="shared: only the tests that may share the CPUs (run them with -n 2); alone: "
        "only those that must not; all (the default): both",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: suite_order_key(getattr(item, "fixturenames", ())))
    part = config.getoption("--suite-part")
    if part == "all":
        return
    root = Path(str(config.rootpath))
    kept, left = [], []
    for item in items:
        path = Path(str(item.path)).relative_to(root).as_posix()
        alone = runs_alone(
            path, getattr(item, "fixturenames", ()), item.get_closest_marker("slow") is not None
        )
        (kept if alone == (part == "alone") else left).append(item)
    if left:
        config.hook.pytest_deselected(items=left)
    items[:] = kept


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


_BEFORE_SESSION = pytest.StashKey[set[str]]()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_BEFORE_SESSION] = hairline_leftovers()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fails the session on anything it left behind (rule: nothing is left), named on the
    terminal and in .hairline-leftovers.txt.

    It only reported for a while: an arm cgroup was left in about one run in four of
    tests/lab/test_isolated_experiment.py's Ctrl-C test. The cause was a Ctrl-C inside
    Popen, whose child joined the arm's cgroup after the stop's kill had found it empty
    (arms/cgroup.py's ArmCgroup.remove now kills again until the rmdir succeeds)."""
    if hasattr(session.config, "workerinput"):  # an xdist worker: its controller checks
        return
    before = session.config.stash.get(_BEFORE_SESSION, None)
    if before is None:
        return
    left = sorted(hairline_leftovers() - before)
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        line = "left behind by this session (rule: nothing is left): " + ", ".join(left)
        if reporter is not None:
            reporter.write_line(line, red=True)
        with (Path(str(session.config.rootpath)) / ".hairline-leftovers.txt").open("a") as out:
            out.write(line + "\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
