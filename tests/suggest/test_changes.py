"""A diff's changed lines mapped to the functions that hold them: Python, Go and Rust, with
methods, renames (same body, and changed body) and moved files."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from hairline.errors import ConfigError
from hairline.suggest.changes import modified_functions

Commit = Callable[[Mapping[str, str | None]], str]  # the `commit` fixture (conftest.py)

PY_BASE = """\
class Index:
    def lookup(self, key):
        return key.lower()

    def size(self):
        return 0


def tokenize(text):
    # split on spaces
    return text.split()


def old_name(x):
    return x * 2


def shrink(values):
    total = 0
    for v in values:
        total += v
    return total
"""

PY_HEAD = """\
class Index:
    def lookup(self, key):
        return key.lower().strip()

    def size(self):
        return 0


def tokenize(text):
    # split on whitespace
    return text.split()


def new_name(x):
    return x * 2


def grow(values):
    total = 0
    for v in values:
        total += v * 2
    return total
"""


def by_name(repo: Path, base: str, head: str) -> dict[str, tuple[str, str | None]]:
    found = modified_functions(repo, base, head)
    return {f.name: (f.change, f.old_name) for f in found.functions}


def test_python_method_rename_and_renamed_with_a_new_body(repo: Path, commit: Commit) -> None:
    base = commit({"app/search.py": PY_BASE})
    head = commit({"app/search.py": PY_HEAD})
    assert by_name(repo, base, head) == {
        "app.search.Index.lookup": ("modified", None),
        "app.search.new_name": ("renamed", "app.search.old_name"),
        "app.search.grow": ("modified", "app.search.shrink"),
    }  # tokenize's comment changed, its code did not: not modified


GO_BASE = """\
package store

type Index struct{ n int }

func (i *Index) Lookup(k string) int {
	return len(k) + i.n
}

func (i Index) Size() int { return i.n }

func Count(xs []int) int {
	c := 0
	for range xs {
		c++
	}
	return c
}
"""

GO_HEAD = GO_BASE.replace("return len(k) + i.n", "return len(k)*2 + i.n").replace(
    "func Count(", "func Tally("
)


def test_go_pointer_method_and_renamed_function(repo: Path, commit: Commit) -> None:
    base = commit({"store/index.go": GO_BASE})
    head = commit({"store/index.go": GO_HEAD})
    assert by_name(repo, base, head) == {
        "store.(*Index).Lookup": ("modified", None),
        "store.Tally": ("renamed", "store.Count"),
    }


RS = """\
pub struct Schedule { step: u64 }

impl Schedule {
    pub fn next(&self, now: u64) -> u64 {
        now + self.step
    }
}
"""


def test_rust_method_in_a_moved_file_keeps_its_history(repo: Path, commit: Commit) -> None:
    commit({"engine/Cargo.toml": '[package]\nname = "my-engine"\n'})
    base = commit({"engine/src/pace.rs": RS})
    commit({"engine/src/pace.rs": "->engine/src/sched/pace.rs"})
    head = commit(
        {"engine/src/sched/pace.rs": RS.replace("now + self.step", "now + 2 * self.step")}
    )
    found = modified_functions(repo, base, head).functions
    assert [(f.name, f.change, f.old_name) for f in found] == [
        ("my_engine::sched::pace::Schedule::next", "modified", "my_engine::pace::Schedule::next")
    ]


def test_unknown_revision_and_folder_are_named(repo: Path, commit: Commit, tmp_path: Path) -> None:
    commit({"a.py": "x = 1\n"})
    with pytest.raises(ConfigError, match="--head nope: no such revision"):
        modified_functions(repo, "main", "nope")
    with pytest.raises(ConfigError, match="not a git repository"):
        modified_functions(tmp_path, "a", "b")
