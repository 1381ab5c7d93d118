"""The bisection driver's parts that need no experiment: the revisions of a real git
repository between good and bad, and each step's experiment configuration."""

from __future__ import annotations

from pathlib import Path

import pytest
from experiment_files import write_experiment
from test_bisect_e2e import eight_commits, git

from hairline.config import ExperimentConfig
from hairline.errors import ConfigError
from hairline.lab.bisect import Revision, revisions_between, step_config
from hairline.lab.files import load_experiment_file


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("bisect") / "repo"
    return root, eight_commits(root)


def test_the_revisions_run_from_good_to_bad_oldest_first(repo: tuple[Path, list[str]]) -> None:
    root, commits = repo
    revisions = revisions_between(root, commits[0], "main")
    assert [r.commit for r in revisions] == commits
    assert revisions[4] == Revision(commits[4], "commit 5: add a cache miss on every request")
    assert revisions_between(root, "main~3", "main~1") == revisions[4:7]


def test_a_merged_branch_counts_as_its_merge_commit(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    commits = eight_commits(root)
    git(root, "checkout", "--quiet", "-b", "feature", commits[2])
    (root / "feature.txt").write_text("x\n")
    git(root, "add", "feature.txt")
    git(root, "commit", "--quiet", "-m", "on the branch")
    git(root, "checkout", "--quiet", "main")
    git(root, "merge", "--quiet", "--no-ff", "-m", "merge feature", "feature")
    revisions = revisions_between(root, commits[0], "main")
    assert [r.subject for r in revisions][-2:] == ["commit 8: tidy up", "merge feature"]
    assert "on the branch" not in {r.subject for r in revisions}


@pytest.mark.parametrize(
    ("good", "bad", "message"),
    [
        ("main~2", "main~5", "--good main~2 is not an ancestor of --bad main~5"),
        ("main", "HEAD", "--good main and --bad HEAD are the same commit"),
        ("v9", "main", "--good 'v9' is not a commit of"),
        ("main~7", "nope", "--bad 'nope' is not a commit of"),
    ],
)
def test_bad_ranges_are_refused_naming_the_flag(
    repo: tuple[Path, list[str]], good: str, bad: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        revisions_between(repo[0], good, bad)
    assert message in caught.value.message


def experiment(tmp_path: Path, root: Path, design: dict[str, object]) -> ExperimentConfig:
    arm = {"git": "main", "repo": str(root), "args": ["--threads", "2"]}
    path = write_experiment(
        tmp_path, tag="bisect-step", arms={"base": arm, "change": {"git": "other"}},
        design=design, service={"build": {"artifact": "app"}},
    ).path  # fmt: skip
    return load_experiment_file(path)


def test_a_step_is_the_baseline_arm_at_two_revisions(
    tmp_path: Path, repo: tuple[Path, list[str]]
) -> None:
    config = experiment(tmp_path, repo[0], {"trials": 4})
    step = step_config(config, "aaa", "bbb", 8, "cpu_ns_per_request")
    assert list(step.arms) == ["base", "change"] and step.baseline == "base"
    assert (step.arms["base"].git, step.arms["change"].git) == ("aaa", "bbb")
    # The candidate side is the baseline arm too: same repository, same arguments.
    assert step.arms["change"].repo == step.arms["base"].repo == str(repo[0])
    assert step.arms["change"].args == ["--threads", "2"]
    assert step.design.trials == 8


def test_a_sequential_design_doubles_its_cap_and_settles_on_the_metric(
    tmp_path: Path, repo: tuple[Path, list[str]]
) -> None:
    config = experiment(tmp_path, repo[0], {"trials": "auto", "max_trials": 6})
    step = step_config(config, "aaa", "bbb", 12, "latency_p99_us")
    assert step.design.trials == "auto"
    assert (step.design.max_trials, step.design.decide_on) == (12, ["latency_p99_us"])
