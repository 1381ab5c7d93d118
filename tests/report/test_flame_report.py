"""A stored profiled experiment, reported the way `hairline report` and the dashboard report
it: the functions that changed, the differential flame graph, and the functions the diff
suggester named, marked in both.

The experiment is examples/sample-service/functions.toml put in the real queue with a
``[suggest]`` reason as ``--suggested-by`` stores it. No profiler runs: each batch's
profile is drawn (seeded) from known stacks and goes through the lab's own code, which
turns a profile into the batch's function rows and writes its folded file
(lab/sampling.py), as after perf.
"""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pyarrow as pa
from fastapi.testclient import TestClient
from rich.console import Console

from hairline.config.suggest import SuggestConfig, SuggestedFunction, SuggestedMix
from hairline.lab.files import load_experiment_file
from hairline.lab.queue import enqueue
from hairline.lab.results import analyze_experiment, save_analysis, store_verdict_rows
from hairline.lab.sampling import BatchProfiles, write_folded
from hairline.lab.schedule import schedule
from hairline.profile.formats import Frame, Profile
from hairline.profile.perf import ROOT, Sampled
from hairline.report.context import experiment_json
from hairline.report.experiment import load_report
from hairline.report.html import render_html
from hairline.report.markdown import render_markdown
from hairline.report.terminal import print_experiment
from hairline.store.db import Store
from hairline.store.models import Experiment, Trial
from hairline.store.observations import write_observations
from hairline.web.app import create_app
from hairline.web.auth import create_token
from hairline.web.deps import COOKIE

EXAMPLE = Path(__file__).parents[2] / "examples" / "sample-service"
ESCAPE = "hairline_engine::sample_stages::escape_strings"
# A C++ symbol: markup characters in a function's name.
PUSH = "std::vector<int, std::allocator<int> >::push_back(int const&)"
# Each stack's share of the baseline's CPU; B makes escape_strings (5%) 40% slower.
STACKS = {
    ("main", "handle", "rank_items"): 0.55,
    ("main", "handle", "load_profile"): 0.20,
    ("main", "handle", "render_json"): 0.08,
    ("main", "handle", "render_json", ESCAPE): 0.05,
    ("main", "handle", PUSH): 0.06,
    ("main", "handle", "parse_request"): 0.06,
}
SLOWER = {ESCAPE: 0.4}
CPU_NS = 100_000.0
SAMPLES = 5_000


def draw(rng: np.random.Generator, arm: str) -> tuple[Profile, float]:
    """One batch's profile of ``arm`` (multinomial, as sampling is) and its CPU per request."""
    weights = {s: w * (1 + SLOWER.get(s[-1], 0.0) * (arm == "B")) for s, w in STACKS.items()}
    total = sum(weights.values())
    counts = rng.multinomial(SAMPLES, [w / total for w in weights.values()])
    stacks = {
        (ROOT, tuple(Frame(name) for name in stack)): float(n)
        for stack, n in zip(weights, counts, strict=True)
        if n
    }
    return Profile(stacks), CPU_NS * total * (1 + rng.normal(0, 0.01))


def store_profiled(store: Store, folder: Path, trials: int = 6) -> int:
    """Enqueue the example with a suggester's reason, store its batches as the lab does,
    analyse it as the processor does; the experiment's id."""
    for name in ("profiled-service.toml", "functions.toml", "trace.jsonl"):
        shutil.copy(EXAMPLE / name, folder / name)
    config = load_experiment_file(folder / "functions.toml")
    why = SuggestedMix(
        base="main", head="slow-escape", cost=5.0, share=0.05, unit="samples", trace="t.jsonl",
        functions=[SuggestedFunction(name="sample_stages::escape_strings", change="modified",
                                     cost=5.0, share=0.05)],
        endpoints=[],
    )  # fmt: skip
    config = config.model_copy(
        update={
            "suggest": SuggestConfig(why=why),
            "design": config.design.model_copy(update={"trials": trials}),
        }
    )
    experiment_id = enqueue(store, config)
    with store.transaction() as session:
        row = session.get(Experiment, experiment_id)
        assert row is not None
        runs = Path(row.artifacts_dir) / "runs"
    runs.mkdir(parents=True)
    rng = np.random.default_rng(27)
    batches = schedule(("A", "B"), trials=trials, design="fully-balanced")
    for index in range(trials):
        rows: dict[str, list[object]] = {
            k: [] for k in ("trial", "batch", "arm", "host", "metric", "value")
        }
        for b in (b for b in batches if b.trial == index):
            tag = f"t{b.trial}b{b.batch}a1"
            profiles, cpu, host_of = BatchProfiles(), {}, {}
            for host, arm in enumerate(b.arm_on_host):
                profile, cpu[arm] = draw(rng, arm)
                profiles.sampled[arm] = Sampled(profile, SAMPLES, 0)
                write_folded(profiles.sampled[arm], runs / f"{tag}-{arm}.folded")
                host_of[arm] = host
            metrics = [(arm, "cpu_ns_per_request", cpu[arm]) for arm in cpu]
            for arm, metric, value in [*metrics, *profiles.rows(cpu)]:
                for key, x in zip(rows, (index, b.batch, arm, host_of[arm], metric, value),
                                  strict=True):  # fmt: skip
                    rows[key].append(x)
            record = {"trial": b.trial, "batch": b.batch, "attempt": 1,
                      "summary": f"{tag}.json", "accepted": True, "problems": [],
                      "profile": profiles.record()}  # fmt: skip
            (runs / f"{tag}.batch.json").write_text(json.dumps(record))
        path = write_observations(folder / f"t{index}.parquet", pa.table(rows))
        with store.transaction() as session:
            trial = session.query(Trial).filter_by(experiment_id=experiment_id, index=index).one()
            trial.state, trial.observations = "done", str(path)
    analysis = analyze_experiment(store, experiment_id, config, history_ids=[])
    with store.transaction() as session:
        row = session.get(Experiment, experiment_id)
        assert row is not None
        row.phase, row.started_at, row.finished_at = "done", 1.0, 60.0
        artifacts = Path(row.artifacts_dir)
        store_verdict_rows(session, experiment_id, analysis)
    save_analysis(artifacts, analysis, history_ids=[])
    return experiment_id


def flame_of(page: str) -> ET.Element:
    """The page's flame graph, read as the XML it must be."""
    match = re.search(r'<svg xmlns="http://www.w3.org/2000/svg" class="hl-flame".*?</svg>', page,
                      flags=re.DOTALL)  # fmt: skip
    assert match, "no flame graph on the page"
    return ET.fromstring(match.group(0))


def frame_rect(svg: ET.Element, name: str) -> ET.Element:
    ns = "{http://www.w3.org/2000/svg}"
    for group in svg.iter(f"{ns}g"):
        title = group.find(f"{ns}title")
        if title is not None and (title.text or "").splitlines()[0] == name:
            rect = group.find(f"{ns}rect")
            assert rect is not None
            return rect
    raise AssertionError(f"no frame of {name}")


def test_a_profiled_experiments_report_has_its_flame_graph_and_marks_the_suggested(
    store: Store, tmp_path: Path
) -> None:
    """escape_strings (5% of the CPU, 250 of 5,000 samples a batch: a sampling noise of
    about 6% a batch) made 40% slower over six trials is about 15 standard errors out;
    the other five functions do not change. False failure: none: every draw is seeded, the
    outcome is fixed for this code."""
    experiment_id = store_profiled(store, tmp_path)
    report = load_report(store, experiment_id)
    [analysis] = report.functions
    flagged = {(c.function, c.kind): c.verdict for c in analysis.flagged}
    assert flagged[(ESCAPE, "self")] == "regression", flagged
    assert not [f for f, k in flagged if k == "self" and f != ESCAPE]
    assert report.suggested_functions == ("sample_stages::escape_strings",)
    # Each arm's stacks in ns per request: their sum is the arm's CPU per request.
    assert set(report.flame_stacks) == {"A", "B"}
    assert abs(sum(report.flame_stacks["A"].values()) / CPU_NS - 1) < 0.01

    page = render_html(report)
    svg = flame_of(page)
    escape = frame_rect(svg, ESCAPE)
    assert escape.attrib["fill"].startswith("hsl(2,78%")  # significant: saturated red
    assert escape.attrib["stroke"] == "#111827"  # named by the diff suggester
    assert frame_rect(svg, PUSH).attrib["stroke"] != "#111827"
    assert "<script" not in page and "url(" not in page
    assert "std::vector&lt;int, std::allocator&lt;int&gt; &gt;::push_back" in page
    # The table marks the suggested function; a sentence says what became of it.
    row = re.search(rf"<tr><td class=\"l\">(.*?)<code>{re.escape(ESCAPE)}</code>", page)
    assert row and 'class="suggested"' in row.group(1)
    assert "the functions the diff suggester named (--suggested-by): " in page
    assert "sample_stages::escape_strings (self regression +" in page

    console = Console(record=True, width=240)
    print_experiment(report, console)
    assert f"◆ {ESCAPE}" in console.export_text()
    markdown = render_markdown(report)
    assert f"| ◆ `{ESCAPE}` | self |" in markdown
    payload = experiment_json(report)
    [comparison] = payload["functions"]["comparisons"]
    marked = {c["function"] for c in comparison["functions"] if c["suggested"]}
    assert marked == {ESCAPE}

    # The dashboard's experiment page shows the same graph.
    client = TestClient(create_app(store))
    client.cookies.set(COOKIE, create_token(store, name="r", team="demo", scope="read"))
    answer = client.get(f"/experiments/{experiment_id}")
    assert answer.status_code == 200
    assert frame_rect(flame_of(answer.text), ESCAPE).attrib["stroke"] == "#111827"
