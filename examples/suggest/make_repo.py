"""Make the example's git repository: ``python3 make_repo.py DEST``.

DEST gets this folder's files in a new repository with two commits on ``main``: the shop
as production runs it (HEAD^), and a change (HEAD) in which ``invoice_tax``, the function
only /invoice runs, does twice its work. Prints the two commits' ids, base then head.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
FILES = ("README.md", "shop.py", "service.toml", "experiment.toml", "trace.jsonl",
         "prod.folded", "make_files.py")  # fmt: skip
BEFORE = 'burn(WORK["invoice_tax"])'
AFTER = 'burn(2 * WORK["invoice_tax"])'


def git(repo: Path, *args: str) -> str:
    # A caller's GIT_DIR or GIT_INDEX_FILE would point git at another repository.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_AUTHOR_NAME="shop", GIT_AUTHOR_EMAIL="shop@example.com",
               GIT_COMMITTER_NAME="shop", GIT_COMMITTER_EMAIL="shop@example.com")  # fmt: skip
    done = subprocess.run(["git", "-C", str(repo), *args], env=env, check=True,
                          capture_output=True, text=True)  # fmt: skip
    return done.stdout.strip()


def make_repo(dest: Path) -> tuple[str, str]:
    """The base and head commits of a new repository at ``dest`` (an empty or new folder)."""
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise SystemExit(f"{dest} is not empty: give a new folder")
    for name in FILES:
        shutil.copy2(HERE / name, dest / name)
    git(dest, "init", "-q", "-b", "main")
    git(dest, "add", *FILES)
    git(dest, "commit", "-q", "-m", "shop: search, item, invoice")
    base = git(dest, "rev-parse", "HEAD")
    shop = dest / "shop.py"
    text = shop.read_text()
    if text.count(BEFORE) != 1:
        raise SystemExit(f"shop.py should hold {BEFORE} once (in invoice_tax)")
    shop.write_text(text.replace(BEFORE, AFTER))
    git(dest, "commit", "-q", "-am", "invoice: tax every line twice")
    return base, git(dest, "rev-parse", "HEAD")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python3 make_repo.py DEST")
    print(*make_repo(Path(sys.argv[1])))
