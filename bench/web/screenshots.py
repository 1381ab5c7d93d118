#!/usr/bin/env python3
"""Pictures of the calibration certificate for the docs: the verdict table, with its "A/A
flagged" and "detects" columns, in the HTML report and on the dashboard's experiment page.

    python bench/web/screenshots.py --run --home /tmp/shots      # docs/img/*-certificate.png
    python bench/web/screenshots.py --home LAB EXPERIMENT_ID --out /tmp/pictures

With --run it first runs two A/A experiments and then the A/B of
examples/sample-service/experiment.toml (B does 5% more CPU work per request) in --home,
about 6 minutes on a quiet 2-CPU machine, and pictures that A/B: each verdict then shows
its record on two A/A runs. Without --run it pictures EXPERIMENT_ID of the lab in --home.
Run it on a quiet machine (`heavy flock -x /tmp/hairline-alone.lock ...` beside other
work): the lab refuses batches whose CPUs something else keeps busy.

The HTML report is what `hairline report ID --html` writes; the dashboard is a real
`hairline serve` on a free loopback port, signed in with an admin token made for the
occasion. Debian's chromium draws both headless through Playwright, as
tests/web/test_browser.py does; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from hairline.kit.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENT = ROOT / "examples" / "sample-service" / "experiment.toml"
HAIRLINE = [sys.executable, "-c", "from hairline.cli import main; main()"]
CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update"]  # fmt: skip
# The docs' column is about 1,000 px wide: the report's own page width. The dashboard is
# drawn as the browser tests see it (1,280 px) and cropped to its report column.
REPORT_WIDTH_PX = 1040
DASHBOARD_WIDTH_PX = 1040
A_A_RUNS = 2
SERVE_TIMEOUT_S = 30.0


def hairline(*args: str, ok: tuple[int, ...] = (0,)) -> str:
    """Run a hairline command; its stdout. ``ok``: the exit statuses that are not errors
    (`run` and `report` exit 1 on a regression, which is what is pictured)."""
    done = subprocess.run([*HAIRLINE, *args], capture_output=True, text=True)
    if done.returncode not in ok:
        raise SystemExit(f"hairline {' '.join(args)}: exit {done.returncode}\n{done.stderr}")
    return done.stdout


def run_experiments(home: Path) -> int:
    """Two A/A runs, then the A/B; the A/B's id."""
    for index in range(A_A_RUNS):
        print(f"A/A run {index + 1} of {A_A_RUNS}...", file=sys.stderr)
        hairline("aa", str(EXPERIMENT), "--home", str(home), "--json", "-")
    print("the A/B...", file=sys.stderr)
    report = json.loads(hairline("run", str(EXPERIMENT), "--home", str(home), "--json", "-",
                                 ok=(0, 1)))  # fmt: skip
    if report["phase"] != "done":
        raise SystemExit(f"the A/B did not finish: {report.get('failure')}")
    return int(report["experiment_id"])


def clip_to_verdicts(page: Any, scope: str, *, from_top: bool = False) -> dict[str, float]:
    """The box from the "Metrics: ..." heading (or the page's top) to the bottom of the
    verdict table."""
    top = page.locator(f"{scope} h2", has_text="Metrics:").first.bounding_box()
    table = page.locator(f"{scope} table.verdicts").first.bounding_box()
    if top is None or table is None:
        raise SystemExit(f"{page.url}: no verdict table (is the experiment analysed?)")
    if from_top:
        return {"x": 0, "y": 0, "width": page.viewport_size["width"],
                "height": table["y"] + table["height"] + 16}  # fmt: skip
    return {
        "x": top["x"] - 12,
        "y": top["y"] - 10,
        "width": max(top["width"], table["width"]) + 24,
        "height": table["y"] + table["height"] - top["y"] + 20,
    }


def shoot_report(browser: Any, home: Path, experiment: int, out: Path, folder: Path) -> None:
    report = folder / "report.html"
    hairline("report", str(experiment), "--home", str(home), "--html", str(report), ok=(0, 1))
    page = browser.new_page(viewport={"width": REPORT_WIDTH_PX, "height": 900})
    page.goto(report.as_uri())
    page.screenshot(path=str(out), clip=clip_to_verdicts(page, "body"), full_page=True)
    page.close()


def shoot_dashboard(browser: Any, home: Path, experiment: int, out: Path, folder: Path) -> None:
    name = f"screenshots-{time.time():.0f}"  # shown in the bar; revoked when done
    token = hairline("token", "create", "--home", str(home), "--team", "docs", "--scope",
                     "admin", "--name", name).strip()  # fmt: skip
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with (folder / "serve.log").open("wb") as log:
        server = subprocess.Popen(
            [*HAIRLINE, "serve", "--home", str(home), "--port", str(port), "--no-schedule"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_healthy(url, server)
        context = browser.new_context(
            viewport={"width": DASHBOARD_WIDTH_PX, "height": 900}
        )  # fmt: skip
        page = context.new_page()
        page.goto(f"{url}/experiments/{experiment}")
        page.fill("input[name=token]", token)
        page.click("button[type=submit]")
        page.wait_for_selector(".report table.verdicts")
        # From the top: the dashboard's bar, the experiment's live status line and gate,
        # then the same report as the HTML file.
        clip = clip_to_verdicts(page, ".report", from_top=True)
        page.screenshot(path=str(out), clip=clip, full_page=True)
        context.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
        hairline("token", "revoke", "--home", str(home), name)


def wait_healthy(url: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + SERVE_TIMEOUT_S
    while time.monotonic() < deadline and server.poll() is None:
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=1) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"hairline serve did not answer {url}/healthz")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiment", type=int, nargs="?", help="the A/B to picture")
    parser.add_argument("--home", type=Path, required=True, help="the lab's folder")
    parser.add_argument("--run", action="store_true", help="run two A/As and the A/B first")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img", help="folder")
    options = parser.parse_args()
    if (options.experiment is None) == (not options.run):
        parser.error("give EXPERIMENT_ID or --run (one of them)")
    if not CHROMIUM.exists():
        raise SystemExit(f"{CHROMIUM} is missing: `make sysdeps` installs Debian's chromium")
    experiment = run_experiments(options.home) if options.run else options.experiment
    from playwright.sync_api import sync_playwright

    options.out.mkdir(parents=True, exist_ok=True)
    written = [options.out / "report-html-certificate.png",
               options.out / "dashboard-certificate.png"]  # fmt: skip
    with tempfile.TemporaryDirectory() as scratch, sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            shoot_report(browser, options.home, experiment, written[0], Path(scratch))
            shoot_dashboard(browser, options.home, experiment, written[1], Path(scratch))
        finally:
            browser.close()
    for path in written:
        print(f"wrote {path} ({path.stat().st_size / 1000:.0f} KB), experiment {experiment}")


if __name__ == "__main__":
    main()
