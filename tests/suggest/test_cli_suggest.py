"""`hairline suggest`: a table or JSON for one diff, "nothing to test" with the reason, the
budget's choice among diffs, and mistakes named (exit 2)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path

from click.testing import CliRunner

from hairline.cli import main
from schema_check import check_schema

Commit = Callable[[Mapping[str, str | None]], str]  # the `commit` fixture (conftest.py)

BASE = "def search(q):\n    return q.lower()\n\n\ndef item(i):\n    return i + 1\n"
PROFILE = "GET /search;app.search 90\nPOST /item;app.item 10\n"


def run(*args: str) -> tuple[int, str]:
    done = CliRunner().invoke(main, list(args))
    return done.exit_code, done.output


def test_one_diff_as_json(repo: Path, commit: Commit, tmp_path: Path) -> None:
    base = commit({"app.py": BASE})
    head = commit({"app.py": BASE.replace("i + 1", "i + 2")})
    (tmp_path / "p.folded").write_text(PROFILE)
    code, out = run("suggest", "--repo", str(repo), "--base", base, "--head", head,
                    "--profile", str(tmp_path / "p.folded"), "--threshold", "5%",
                    "--json")  # fmt: skip
    data = json.loads(out)
    check_schema("suggestion", data)
    assert code == 0 and data["test"] is True and data["share"] == 0.1
    assert [e["endpoint"] for e in data["endpoints"]] == ["POST /item"]
    assert data["functions"][0]["name"] == "app.item"


def test_nothing_to_test_says_why_and_exits_0(repo: Path, commit: Commit, tmp_path: Path) -> None:
    commit({"app.py": BASE})
    commit({"app.py": BASE + "\n\ndef unused():\n    return 0\n"})
    (tmp_path / "p.folded").write_text(PROFILE)
    code, out = run("suggest", "--repo", str(repo), "--profile", str(tmp_path / "p.folded"))
    assert code == 0
    assert "nothing to test" in out and "no function the diff modifies appears" in out


def test_the_budget_picks_the_costliest_diffs(repo: Path, commit: Commit, tmp_path: Path) -> None:
    a = commit({"app.py": BASE})
    b = commit({"app.py": BASE.replace("i + 1", "i + 2")})
    c = commit({"app.py": BASE.replace("i + 1", "i + 2").replace("lower()", "casefold()")})
    (tmp_path / "diffs").write_text(f"{a} {b}\n# the search change\n{b} {c}\n")
    (tmp_path / "p.folded").write_text(PROFILE)
    code, out = run("suggest", "--repo", str(repo), "--profile", str(tmp_path / "p.folded"),
                    "--diffs", str(tmp_path / "diffs"), "--budget-machine-hours", "1.5",
                    "--hours-per-test", "1", "--json")  # fmt: skip
    assert code == 0
    assert [(d["head"], d["chosen"]) for d in json.loads(out)["diffs"]] == [(b, False), (c, True)]
    check_schema("suggestions", json.loads(out))


def test_mistakes_are_named(repo: Path, commit: Commit, tmp_path: Path) -> None:
    commit({"app.py": BASE})
    commit({"app.py": BASE.replace("i + 1", "i + 2")})
    bad = tmp_path / "bad.folded"
    bad.write_text("GET /a;f 1\nGET /a;f many\n")
    code, out = run("suggest", "--repo", str(repo), "--profile", str(bad))
    assert code == 2 and "bad.folded:2" in out
    (tmp_path / "p.folded").write_text(PROFILE)
    code, out = run("suggest", "--repo", str(repo), "--head", "nope", "--profile",
                    str(tmp_path / "p.folded"))  # fmt: skip
    assert code == 2 and "--head nope: no such revision" in out


def test_a_diff_with_no_function_says_which_kind_it_is(
    repo: Path, commit: Commit, tmp_path: Path
) -> None:
    """An empty diff is not "modifies no function of a language read here"."""
    base = commit({"app.py": BASE})
    docs = commit({"NOTES.md": "# notes\n"})
    header = commit({"app.py": "import os\n" + BASE})
    (tmp_path / "p.folded").write_text(PROFILE)
    said = {}
    for name, (old, new) in {"empty": (base, base), "docs": (base, docs),
                             "header": (docs, header)}.items():  # fmt: skip
        code, out = run("suggest", "--repo", str(repo), "--base", old, "--head", new,
                        "--profile", str(tmp_path / "p.folded"), "--json")  # fmt: skip
        assert code == 0, out
        data = json.loads(out)
        assert data["test"] is False
        said[name] = data["reason"]
    assert said["empty"] == f"the diff is empty: {base} changes no line against {base}"
    assert said["docs"] == (
        "the diff changes only files of languages not read here (NOTES.md); Python, Go and Rust are"
    )
    assert said["header"] == "the diff changes 1 line outside every function and no function"
