#!/usr/bin/env python3
"""A picture of an HTML report's "Functions that changed": its table and the differential
flame graph, as docs/img/flamegraph.png shows them.

    python bench/profiling/flame_screenshot.py REPORT.html docs/img/flamegraph.png

REPORT.html is what `hairline run FILE --html REPORT.html` wrote for a profiled experiment
(docs/profiling.md). Debian's chromium draws it headless through Playwright, as
tests/web/test_browser.py does; nothing is downloaded, and the report loads nothing.
"""

from __future__ import annotations

import argparse
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update"]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="an HTML report of a profiled experiment")
    parser.add_argument("out", type=Path, help="the PNG to write")
    parser.add_argument("--width", type=int, default=1040, help="the window's width in px")
    options = parser.parse_args()
    if not CHROMIUM.exists():
        raise SystemExit(f"{CHROMIUM} is missing: `make sysdeps` installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            page = browser.new_page(viewport={"width": options.width, "height": 900})
            page.goto(options.report.resolve().as_uri())
            top = page.locator("h2", has_text="Functions that changed").bounding_box()
            bottom = page.locator("figure.flame").first.bounding_box()
            if top is None or bottom is None:
                raise SystemExit(f"{options.report}: no functions section with a flame graph")
            left = min(top["x"], bottom["x"]) - 8
            clip = {
                "x": left,
                "y": top["y"] - 8,
                "width": max(top["width"], bottom["width"]) + 16,
                "height": bottom["y"] + bottom["height"] - top["y"] + 16,
            }
            page.screenshot(path=str(options.out), clip=clip, full_page=True)
        finally:
            browser.close()
    print(f"wrote {options.out}")


if __name__ == "__main__":
    main()
