"""`hairline bisect` end to end: a git repository of eight commits of a small service, the
fifth of which adds 10% to the CPU work of a request, bisected by real experiments on this
machine.

The service in the repository is the sample service started by ``app/serve.sh``, which
appends ``--regress-cpu`` with the number in ``app/regress.txt``: "0.0" in commits 1 to 4,
"0.10" from commit 5. Every commit also changes ``app/VERSION``, so each revision is its own
build (the cache key is the tree's content).
"""

from __future__ import annotations

import json
import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema
from experiment_files import write_experiment
from sqlalchemy import select
from test_lab_e2e import assert_nothing_left, hairline

from hairline.store.db import open_store
from hairline.store.models import Arm, Experiment
from schema_check import check_schema

SERVE = """#!/bin/sh
# serve.sh COMMAND...: run the service's command with this revision's CPU regression.
here=$(cd "$(dirname "$0")" && pwd)
exec "$@" --regress-cpu "$(cat "$here/regress.txt")"
"""
CULPRIT = 5  # the commit (1-based) that adds 10% to the CPU work of a request


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
    }  # fmt: skip
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        env.pop(name, None)
    done = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True,
                          check=True)  # fmt: skip
    return done.stdout.strip()


def eight_commits(repo: Path) -> list[str]:
    """The repository, and its commits' hashes, oldest first."""
    app = repo / "app"
    app.mkdir(parents=True)
    git(repo, "init", "--quiet", "--initial-branch", "main")
    (app / "serve.sh").write_text(SERVE)
    commits = []
    for number in range(1, 9):
        (app / "VERSION").write_text(f"{number}\n")
        (app / "regress.txt").write_text("0.10\n" if number >= CULPRIT else "0.0\n")
        git(repo, "add", "app")
        subject = "add a cache miss on every request" if number == CULPRIT else "tidy up"
        git(repo, "commit", "--quiet", "-m", f"commit {number}: {subject}")
        commits.append(git(repo, "rev-parse", "HEAD"))
    return commits


@pytest.mark.slow
def test_bisect_names_commit_five_of_eight_within_its_experiment_budget(
    tmp_path: Path, engine_path: Path
) -> None:
    """Four experiments: commit 4 against the good commit 1 (no change), 6 and then 5 against 1
    (regression), and the confirmation of 5 against its parent 4. The change is docs/bisect.md's:
    10% more work a request, judged against a 4% threshold over six trials a step of one batch
    each, in a duet (both arms on one CPU, the engine on the other: docs/hosts.md). Its steps
    read +6.3% to +7.5% of CPU per request there in two runs (split, an arm a CPU: +7% to
    +9%): the kernel's part of a request is not scaled.

    False failure: under 1e-5 at the noise measured at these settings. The bisection fails if
    the unchanged step reads "regression" (its trimmed mean over 4%, significant), a regression
    step reads "no change", or repeats (an inconclusive step again with twice the trials, at
    most two in all: the budget) run out. `python bench/stats/bisect_budget.py --trials 6
    --threshold 4 --effect 6.3 --sds 1.6,2,2.5` simulates 100,000 bisections (seed 3) through
    the lab's own models and verdict rule: with per-trial differences resampled from a
    40-trial A/A of the sample service in a duet at these settings, one batch a trial (sd
    1.61%, the largest 3.6%; 2026-11-29 22:21 UTC) none failed and 12% needed a repeat; with
    normal trials of sd 1.6% 1e-5, at 2% 3e-4. Four trials of one batch failed 5e-5 there
    but 2.5e-3 at 2%; four trials of two batches (the fully balanced design, 8 batches a
    step where these are 6; a trial's sd about 1/sqrt(2) of a batch's) about 1e-5 at a
    batch's 2%. Split, the A/A's trials had an sd of 1.97% with
    four of 40 off by 3-8%, which took six trials of two batches a step and 87 s of the
    suite. How small a change a bisection finds is a benchmark's question; this checks the
    bisection on the issue's 10%."""
    repo = tmp_path / "repo"
    commits = eight_commits(repo)
    git_arm = {"git": "main", "repo": str(repo)}
    # 1,000/s for 1 s a batch: at 2,000-2,500/s a split A/A's per-trial spread was 1.3-1.6%
    # against 0.76% at 1,000/s (2026-11-29, /tmp A/As of 8 trials), the engine and the
    # arms sharing two CPUs.
    path = write_experiment(
        tmp_path / "exp",
        tag="bisect",
        arms={"A": git_arm, "B": git_arm},
        load={"rate_per_s": 1000, "duration_s": 1.0, "warmup_duration_s": 0.5},
        # One batch a trial: in a duet both arms share the CPU set, so the fully balanced
        # design's swap of arms between hosts only repeats the batch (docs/hosts.md).
        design={"trials": 6, "name": "request-balanced"},
        hosts={"local_layout": "duet"},
        service={"build": {"artifact": "app"}},
        thresholds={"cpu_ns_per_request": "4%"},
        wrap="sh {artifact}/serve.sh {command}",
    ).path
    home = tmp_path / "home"
    out_json, out_md = tmp_path / "bisect.json", tmp_path / "bisect.md"
    junit = tmp_path / "bisect.xml"
    done = hairline("bisect", str(path), "--good", commits[0], "--bad", commits[-1],
                    "--json", str(out_json), "--markdown", str(out_md), "--junit", str(junit),
                    home=home, engine=engine_path, timeout_s=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out_json.read_text())
    check_schema("bisection", result)
    assert result["status"] == "culprit"
    assert result["culprit"]["commit"] == commits[CULPRIT - 1]
    assert result["culprit"]["subject"] == "commit 5: add a cache miss on every request"
    # Four without repeats; the budget (four and two) allows two repeats of an inconclusive step.
    assert result["experiments"] == len(result["steps"]) <= 6
    last = result["steps"][-1]
    assert last["candidate"]["commit"] == commits[CULPRIT - 1]
    assert last["verdict"] == "regression" and last["effect_rel"] > 0.04
    assert "commit 5: add a cache miss" in out_md.read_text()
    assert "bisect: step 1 (search)" in done.stdout
    xmlschema.validate(str(junit), str(Path(__file__).parents[2] / "docs/schema/junit.xsd"))
    [culprit] = ET.parse(junit).findall(".//testcase[@name='culprit']/failure")
    assert commits[CULPRIT - 1] in culprit.get("message", "")

    store = open_store(home=home)
    try:
        with store.transaction() as session:
            origins = session.scalars(select(Experiment.origin)).all()
            arms = session.execute(select(Arm.build_key, Arm.build_cached)).all()
    finally:
        store.close()
    assert set(origins) == {"bisect"} and len(origins) == result["experiments"]
    # The good revision is every search step's baseline: built once, then taken from the cache.
    tested = {s["baseline"]["commit"] for s in result["steps"]}
    tested |= {s["candidate"]["commit"] for s in result["steps"]}
    assert len({key for key, _ in arms}) == len(tested)
    assert sum(not cached for _, cached in arms) == len(tested)
    assert_nothing_left(home)


def test_a_file_whose_baseline_names_no_revision_is_refused(
    tmp_path: Path, engine_path: Path
) -> None:
    path = write_experiment(tmp_path / "exp", tag="bisect-nogit").path
    done = hairline("bisect", str(path), "--good", "HEAD~1", "--bad", "HEAD",
                    home=tmp_path / "home", engine=engine_path)  # fmt: skip
    assert done.returncode == 2
    assert "arms.A: the baseline arm names no git revision" in done.stderr
    assert 'add git = "HEAD"' in done.stderr


def test_a_good_revision_after_the_bad_one_is_refused(tmp_path: Path, engine_path: Path) -> None:
    repo = tmp_path / "repo"
    commits = eight_commits(repo)
    arm = {"git": "main", "repo": str(repo)}
    path = write_experiment(
        tmp_path / "exp", tag="bisect-order", arms={"A": arm, "B": arm},
        service={"build": {"artifact": "app"}},
    ).path  # fmt: skip
    done = hairline("bisect", str(path), "--good", commits[5], "--bad", commits[2],
                    home=tmp_path / "home", engine=engine_path)  # fmt: skip
    assert done.returncode == 2
    assert "--good" in done.stderr and "is not an ancestor of --bad" in done.stderr
    unknown = hairline("bisect", str(path), "--good", "nope", "--bad", commits[2],
                       home=tmp_path / "home", engine=engine_path)  # fmt: skip
    assert unknown.returncode == 2 and "--good 'nope' is not a commit" in unknown.stderr
