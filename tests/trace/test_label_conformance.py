"""The label rule conformance suite, tests/data/label_rules.json, against the importer's
rules (:mod:`hairline.trace.labels`). The recorder runs the same file
(engine/tests/it/label_rules.rs), so both read every rule alike."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hairline.errors import ConfigError
from hairline.trace.labels import Labeller, parse_label_rule, parse_label_rules

SUITE: dict[str, Any] = json.loads(
    (Path(__file__).parents[1] / "data" / "label_rules.json").read_text(encoding="utf-8")
)


@pytest.mark.parametrize("case", SUITE["rules"], ids=lambda case: case["rule"][:40])
def test_each_rule_is_accepted_or_refused_and_labels_as_the_suite_says(
    case: dict[str, Any],
) -> None:
    if case["accept"]:
        labeller = Labeller([parse_label_rule(case["rule"])])
        assert [[path, labeller(path)] for path, _ in case["labels"]] == case["labels"]
    else:
        with pytest.raises(ConfigError) as err:
            parse_label_rule(case["rule"])
        assert err.value.message.startswith("--label")
        assert case["refusal"] in err.value.message


@pytest.mark.parametrize("case", SUITE["labelling"])
def test_rules_in_order_and_normalised_ids_label_as_the_suite_says(case: dict[str, Any]) -> None:
    labeller = Labeller(parse_label_rules(case["rules"]), normalize_ids=case["normalize_ids"])
    assert [[path, labeller(path)] for path, _ in case["labels"]] == case["labels"]


# Pieces of regexes, the common and the troublesome, for rules no one wrote by hand.
_PIECES = (
    "a", "b", "/", "é", "(", ")", "(?:", "(?P<n>", "(?P<n>a)", "(?i)", "(?i:", "(?=", "(?<",
    "(?P=n)", "[", "]", "[^", "[:", "^", "$", "*", "+", "?", "{2}", "{1,3}", "{,2}", "{x}",
    "{", "}", "|", "\\", "\\d", "\\w", "\\b", "\\Z", "\\z", "\\1", "\\p", "\\x4", "\\x41",
    "\\.", "\\<", "=", "-", "&&", ".", ":", "<", ">", "P", "x", "#", " ",
)  # fmt: skip


def test_random_rules_are_refused_by_the_recorder_exactly_when_here(engine_path: Path) -> None:
    """False failure: none: a seeded rng draws the same inputs on every run, and the property holds
    for every input. The 60-second timeout is for one recorder run that exits at once."""
    rng = np.random.default_rng(7)
    rules = []
    for _ in range(600):
        pieces = rng.choice(len(_PIECES), size=int(rng.integers(1, 9)))
        rules.append("".join(_PIECES[k] for k in pieces) + "=name")
    refused_here = set()
    for rule in rules:
        try:
            parse_label_rule(rule)
        except ConfigError:
            refused_here.add(rule)

    # One recorder run reads every rule and reports each one it refuses, then exits:
    # --stats-path bad keeps it from ever listening.
    command = [str(engine_path), "record", "--listen", "127.0.0.1:0", "--stats-path", "bad"]
    command += ["--upstream", "http://127.0.0.1:1", "--out", "/dev/null"]
    command += [f"--label={rule}" for rule in rules]
    out = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    refused_there = {
        rule for rule in rules if f"--label {json.dumps(rule, ensure_ascii=False)}:" in out.stderr
    }

    assert 100 < len(refused_here) < 500
    assert sorted(refused_there ^ refused_here) == []
