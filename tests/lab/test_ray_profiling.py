"""Profiling on the ray backend: each arm's stacks are sampled by a perf on the arm's own
node, started by that host's agent (arms/node_profile.py), and the samples come back to
the processor, which writes the folded stacks into its runs folder and compares the
functions as on the local backend (tests/lab/test_profiling_e2e.py). A node without perf
still runs the experiment, and the report says which node lacked what.

The nodes are this machine's loopback addresses (tests/conftest.py's ``ray_cluster``), so
the test can see where each perf ran: its parent is the host's agent (a ``ray::HostAgent``
actor process) and it writes under the nodes' agent home, not the processor's."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow.compute as pc
import pytest
from experiment_files import write_experiment

from hairline.hosts.registry import disable_hosts
from hairline.profile.perf import perf_binary
from hairline.store.db import open_store
from hairline.store.observations import read_observations
from schema_check import check_schema
from suitekit import RayCluster, live_processes_with

pytestmark = pytest.mark.slow

# As the local profiling test: frame-pointer stacks at twice the default frequency, small
# functions pooled.
PROFILE = {"frequency_hz": 1999, "call_graph": "fp", "min_share": 0.02}
LOAD_PROFILE = "hairline_engine::sample::stages::load_profile"


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def parent_of(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return int(next(x for x in status.splitlines() if x.startswith("PPid:")).split()[1])


def perf_records() -> list[int]:
    """The ``perf record`` processes on this machine (every node's: they are all here).
    Reads each process's short name first: the whole /proc's command lines every 50 ms
    took CPU the arms beside it would miss."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_bytes().startswith(b"perf"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return [pid for pid in found if " record " in cmdline(pid)]


class PerfWatch:
    """Every ``perf record`` seen while the block runs (polled every 50 ms), with its
    command line and its parent's; each batch's perf runs for over a second."""

    def __init__(self) -> None:
        self.seen: dict[int, tuple[str, str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.wait(0.05):
            for pid in perf_records():
                if pid not in self.seen and (line := cmdline(pid)):
                    self.seen[pid] = (line, cmdline(parent_of(pid)))

    def __enter__(self) -> PerfWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def run_on_ray(
    cluster: RayCluster, tmp_path: Path, arms: dict[str, dict[str, object]], extra: str = ""
) -> tuple[dict, Path]:
    """`hairline run --backend ray` of a profiled sample service (two trials of 1 s
    batches); the report and the processor's runs folder."""
    exp = write_experiment(
        tmp_path / "exp", tag="ray-profiled", arms=arms,
        load={"rate_per_s": 1000, "duration_s": 1.0}, design={"trials": 2},
        service={"profile": PROFILE},
    )  # fmt: skip
    if extra:
        exp.path.write_text(exp.path.read_text() + "\n" + extra)
    out = tmp_path / "ray.json"
    done = cluster.hairline(
        "run", str(exp.path), "--backend", "ray", "--ray-address", cluster.address,
        "--json", str(out), "--home", str(tmp_path / "home"), timeout_s=500,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stdout + done.stderr
    report = json.loads(out.read_text())
    check_schema("experiment-report", report)
    assert report["phase"] == "done", report.get("failure")
    runs = tmp_path / "home" / "experiments" / str(report["experiment_id"]) / "runs"
    assert live_processes_with(exp.marker) == [], "arms left running"
    return report, runs


@pytest.mark.timeout(600)
def test_a_profiled_ab_on_ray_samples_each_arm_on_its_node_and_compares_its_functions(
    ray_cluster: RayCluster, tmp_path: Path
) -> None:
    """False failure: under 1e-4: as the local test (tests/lab/test_profiling_e2e.py) the
    point estimate is checked, not the verdict. B doubles ``load_profile``, about 14% of
    the sampled CPU here. A run (2026-11-29) held 286 to 374 samples per arm and batch
    (1,000 requests/s for 1 s at 1,999 Hz), about 42 of load_profile in A and twice that in
    B: a per-batch Poisson sd of the log ratio near 0.19, 0.095 over the four batch pairs.
    It read +102%; the bounds +30% and +200% are over 4 such sds away (log scale), and the
    next largest change of a function's own cost was a quarter of its ns per request."""
    if perf_binary() is None:
        pytest.skip("perf is not installed (make sysdeps installs linux-perf)")
    slower = {"args": ["--slow-function", "load_profile=1.0"]}
    with PerfWatch() as watch:
        report, runs = run_on_ray(ray_cluster, tmp_path, {"A": {}, "B": slower})

    # The functions were compared, as on the local backend.
    functions = report["functions"]
    assert functions["note"] is None, functions
    [comparison] = functions["comparisons"]
    assert comparison["candidate"] == "B" and comparison["trials"] == 2
    own = [c for c in comparison["functions"] if c["cost"] == "self"]
    largest = max(own, key=lambda c: abs(c["effect_ns"] or 0))
    assert largest["function"] == LOAD_PROFILE, own[:3]
    assert 0.3 < largest["effect_rel"] < 2.0, largest
    observations = read_observations(runs.parent / "observations.parquet").table
    fn = observations.filter(pc.starts_with(observations["metric"], "fn."))
    assert set(fn["arm"].to_pylist()) == {"A", "B"}

    # Each arm was sampled on the node it ran on: the batch records say which, the arms'
    # CPU readings say the same node, and every perf was a child of a host's agent writing
    # on the node's side (the nodes' agent home), none of the processor's.
    records = [json.loads(p.read_text()) for p in sorted(runs.glob("t*b*a*.batch.json"))]
    # (An attempt whose arm died under load has no profile: none is expected here.)
    records = [r for r in records if "profile" in r]
    assert len(records) >= 4
    for record in records:
        for arm, sampled in record["profile"].items():
            assert sampled["samples"] > 100 and "why" not in sampled, record
            assert sampled["on"] == record["measured_by"][arm].split(" on ")[-1], record
    # Two nodes of the session's cluster (w2 and w3, or w4 when a test started it).
    assert len({s["on"] for r in records for s in r["profile"].values()}) == 2
    assert len(watch.seen) >= 2 * len(records), watch.seen
    agents = str((ray_cluster.root / "agents").resolve())
    for line, parent in watch.seen.values():
        assert parent.startswith("ray::HostAgent"), (line, parent)
        assert f"-o {agents}/" in line, line
    assert perf_records() == [], "a perf was left running"
    assert len(list(runs.glob("*.folded"))) == 2 * 2 * 2
    # The arms' logs came back from their nodes into the experiment's runs folder.
    assert (runs / "t0b0a1-A.log").exists() and (runs / "t0b0a1-B.log").exists()
    assert not list(runs.glob("*.perf.*")) and not list(Path(agents).rglob("*.perf.data"))


@pytest.fixture
def node_without_perf(ray_cluster: RayCluster, tmp_path: Path) -> Iterator[str]:
    """A node (w7) whose agent's HAIRLINE_PERF is not an executable. Its host is disabled
    after the test, so that no later test is given it; the node itself stops with the
    session's others, side by side (stopping it alone took 8.6 s of this test's 24)."""
    name = "w7"
    ray_cluster.start_workers([name], env={"HAIRLINE_PERF": str(tmp_path / "no-perf-here")})
    try:
        yield name
    finally:
        store = open_store(ray_cluster.db_url)
        try:
            assert disable_hosts(store, [name], force=True) == [name]
        finally:
            store.close()


@pytest.mark.timeout(600)
def test_on_a_node_without_perf_the_experiment_runs_and_the_report_says_which_node_lacks_it(
    ray_cluster: RayCluster, node_without_perf: str, tmp_path: Path
) -> None:
    """False failure: none from timing: no verdict is checked. The processor's own perf is
    there, and so is w2's; w7's is not, and where an arm ran is what counts: A, pinned to
    w7, has no stacks, so no function is compared, and the report names w7 alone."""
    pin = f'[hosts]\npin = {{ A = ["{node_without_perf}"], B = ["w2"] }}\n'
    report, runs = run_on_ray(ray_cluster, tmp_path, {"A": {}, "B": {}}, extra=pin)
    assert report["analysis"] is not None and report["trials_done"] == 2
    note = report["functions"]["note"]
    missing = f"HAIRLINE_PERF={tmp_path / 'no-perf-here'} is not an executable"
    assert note.startswith(f"no function metrics: on {node_without_perf}: {missing}"), note
    assert note.count(" on w") == 1, note
    assert report["functions"]["comparisons"] == []
    # w2 sampled the arm it ran, and only w2 did.
    records = [json.loads(p.read_text()) for p in sorted(runs.glob("t*b*a*.batch.json"))]
    sampled_on = {s["on"] for r in records for s in r["profile"].values() if "why" not in s}
    assert sampled_on == {"w2"}, records
    assert list(runs.glob("*.folded")), "w2's stacks did not come back"
