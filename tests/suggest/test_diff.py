"""Unified diffs parsed into changed lines per file, on both sides."""

from __future__ import annotations

from hairline.suggest.diff import parse_diff

DIFF = """\
diff --git a/app/search.py b/app/search.py
index 1111111..2222222 100644
--- a/app/search.py
+++ b/app/search.py
@@ -3 +3,2 @@ class Index:
-        return key.lower()
+        # case-insensitive
+        return key.lower().strip()
@@ -10,2 +11,0 @@ def tokenize(text):
-    a = 1
-    b = 2
diff --git a/old/util.go b/new/util.go
similarity index 90%
rename from old/util.go
rename to new/util.go
index 3333333..4444444 100644
--- a/old/util.go
+++ b/new/util.go
@@ -7,0 +8 @@ func F() {
+	x++
diff --git a/moved.rs b/elsewhere/moved.rs
similarity index 100%
rename from moved.rs
rename to elsewhere/moved.rs
diff --git a/gone.py b/gone.py
deleted file mode 100644
index 5555555..0000000
--- a/gone.py
+++ /dev/null
@@ -1,2 +0,0 @@
-def f():
---  a comment line that starts with two dashes
"""


def test_each_file_has_its_changed_lines_on_both_sides() -> None:
    search, util, moved, gone = parse_diff(DIFF)
    assert (search.old_path, search.new_path) == ("app/search.py", "app/search.py")
    assert search.removed == (3, 10, 11)
    assert search.added == (3, 4)
    assert (util.old_path, util.new_path, util.moved) == ("old/util.go", "new/util.go", True)
    assert util.added == (8,) and util.removed == ()
    # A pure move (100% similar) has no hunks: nothing in it changed.
    assert (moved.old_path, moved.new_path, moved.added, moved.removed) == (
        "moved.rs",
        "elsewhere/moved.rs",
        (),
        (),
    )
    assert (gone.old_path, gone.new_path, gone.removed) == ("gone.py", None, (1, 2))


def test_an_empty_diff_has_no_files() -> None:
    assert parse_diff("") == []
