"""action.yml, the GitHub Action (docs/ci.md, "GitHub Action"), is what GitHub reads it as:
a composite action whose steps are well formed, whose every `inputs.X` and
`steps.ID.outputs.X` names something that exists, whose inputs reach the shell only
through env, whose outputs are those `hairline ci action` writes, and whose run step passes
flags that command has. tests/cli/test_cli_ci_action.py runs that command."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import click
import yaml

from hairline.ci.action import OUTPUTS
from hairline.cli import main

ROOT = Path(__file__).resolve().parents[1]
TEXT = (ROOT / "action.yml").read_text()
ACTION: dict[str, Any] = yaml.safe_load(TEXT)
STEPS: list[dict[str, Any]] = ACTION["runs"]["steps"]
EXPRESSION = re.compile(r"\$\{\{(.*?)\}\}")


def expressions() -> list[str]:
    """Every ``${{ ... }}`` and every step's ``if`` (an expression without the braces)."""
    found = [e.strip() for e in EXPRESSION.findall(TEXT)]
    return found + [str(step["if"]) for step in STEPS if "if" in step]


def test_it_is_a_composite_action_with_the_keys_github_requires() -> None:
    assert {"name", "description", "inputs", "outputs", "runs"} <= set(ACTION)
    assert ACTION["runs"]["using"] == "composite" and STEPS
    for name, spec in ACTION["inputs"].items():
        assert re.fullmatch(r"[a-z][a-z0-9-]*", name) and spec.get("description"), name
        assert "default" in spec or spec.get("required") is True, f"{name}: no default"
    for name, spec in ACTION["outputs"].items():
        assert spec.get("description") and spec.get("value"), name


def test_every_step_runs_a_script_with_a_shell_or_uses_a_pinned_action() -> None:
    for step in STEPS:
        assert step.get("name"), step
        assert ("run" in step) != ("uses" in step), f"{step['name']}: one of run or uses"
        if "run" in step:
            assert step.get("shell") == "bash", f"{step['name']}: a run step needs shell"
        else:
            assert re.fullmatch(r"actions/[a-z-]+@v\d+", step["uses"]), step["uses"]


def test_every_input_and_step_output_named_exists_and_every_input_is_used() -> None:
    inputs = set(ACTION["inputs"])
    ids = {step["id"] for step in STEPS if "id" in step}
    used = set()
    for expression in expressions():
        for name in re.findall(r"\binputs\.([a-z0-9-]+)", expression):
            assert name in inputs, f"${{{{ {expression} }}}} names no input"
            used.add(name)
        for step_id, _output in re.findall(r"\bsteps\.([a-z0-9_-]+)\.outputs\.([a-z-]+)",
                                           expression):  # fmt: skip
            assert step_id in ids, f"${{{{ {expression} }}}} names no step"
    assert used == inputs, f"inputs nothing reads: {sorted(inputs - used)}"


def test_the_outputs_are_the_ones_hairline_ci_action_writes() -> None:
    assert tuple(ACTION["outputs"]) == OUTPUTS
    for name, spec in ACTION["outputs"].items():
        assert spec["value"] == f"${{{{ steps.run.outputs.{name} }}}}"


def test_inputs_reach_the_shell_only_through_env() -> None:
    """A value pasted into a script by ${{ }} is run as shell code (a branch named
    `$(curl ...)`); through env it is only ever a string."""
    for step in STEPS:
        assert "${{" not in step.get("run", ""), f"{step['name']}: an expression in run"


def test_the_run_step_passes_only_flags_hairline_ci_action_has() -> None:
    (run,) = [step for step in STEPS if step.get("id") == "run"]
    words = shlex.split(run["run"].replace("\\\n", " "))
    start = words.index("hairline")
    assert words[start : start + 3] == ["hairline", "ci", "action"]
    group = main.get_command(click.Context(main), "ci")
    assert isinstance(group, click.Group)
    command = group.commands["action"]
    flags = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    passed = {w for w in words[start + 3 :] if w.startswith("--")}
    assert passed <= flags, sorted(passed - flags)
    # "$comment" is --comment or --no-comment, set above the command
    assert {"--comment", "--no-comment"} <= flags and '"$comment"' in run["run"]
