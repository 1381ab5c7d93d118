"""The dashboard in a real headless Chromium (Debian's ``chromium``, driven by Playwright
for Python; no browser is downloaded) against the served lab of conftest.py: the pages
render a real regression and a real A/A run, a running experiment's progress changes on
screen without a reload, and acknowledging a regression works through the form.

Each page's screenshot is written under the test's tmp_path (docs/img/ holds copies).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from weblab import HAIRLINE, WebLab, experiment_toml, submission, wait_ended

from schema_check import check_schema

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
HTMX = Path(__file__).parents[2] / "python/hairline/web/static/vendor/htmx.min.js"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
# Long enough for a short experiment queued behind nothing on a slow 2-CPU machine.
LIVE_TIMEOUT_S = 240.0


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: `make sysdeps` installs Debian's chromium as root")
    if not HTMX.is_file():
        pytest.fail(f"{HTMX} is missing: `make build` installs htmx from npm", pytrace=False)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def signed_in(chromium: Any, lab: WebLab, token: str) -> Any:
    """A new browser tab signed in through the login form."""
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(lab.url + "/experiments")
    assert page.locator("input[name=token]").is_visible()  # 401: the login form
    page.fill("input[name=token]", lab.tokens[token])
    page.click("button[type=submit]")
    page.wait_for_url("**/experiments")
    return page


def shoot(page: Any, folder: Path, name: str) -> Path:
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000
    return path


def certificate_on_screen(page: Any, table: str) -> bool:
    """Whether the verdict table's last column (the certificate's "detects") is in the
    window, not behind the table's horizontal scroll bar: the sample service's long
    metric names once pushed it and "A/A flagged" off a 1,000 px column."""
    scroll, client = page.locator(table).evaluate("t => [t.scrollWidth, t.clientWidth]")
    box = page.locator(f"{table} th", has_text="detects").bounding_box()
    width = page.viewport_size["width"]
    return bool(scroll <= client and box is not None and box["x"] + box["width"] <= width)


def test_every_page_renders_a_real_regression_and_a_real_aa_run(
    chromium: Any, web_lab: WebLab, web_runs: dict[str, int], tmp_path: Path
) -> None:
    """False failure: at most about 1e-3 through the session's web_runs
    (tests/web/conftest.py): the A/A at alpha 0.0001 on its seven deciding metrics fails its
    gate in at most 7e-4 of runs where the model is calibrated (a union bound), and the 30%
    regression (in a duet it reads +19% to +20%, one batch a trial) over 4 trials at
    1,500/s is about eight times its interval's half-width (about 2%: per-trial spreads of
    1.4-1.6 points, three runs on 2026-11-29) past the 2% threshold."""
    regression, aa = web_runs["regression"], web_runs["aa"]
    page = signed_in(chromium, web_lab, "demo-read")

    row = page.locator(f"#experiment-{regression}")
    assert row.get_attribute("data-phase") == "done"
    assert "fail" in row.locator(".gate").inner_text()
    assert "pass" in page.locator(f"#experiment-{aa} .gate").inner_text()
    shoot(page, tmp_path, "experiments")

    page.click(f"#experiment-{regression} a[href='/experiments/{regression}']")
    page.wait_for_url(f"**/experiments/{regression}")
    assert "regression" in page.locator(".report .status").inner_text()
    assert page.locator(".report svg").count() >= 2  # the report's own charts
    facts = page.locator("table.facts")
    assert facts.count() >= 1 and "cpu_model" in facts.first.inner_text()
    assert page.locator("#live").get_attribute("data-phase") == "done"
    # Each verdict's certificate: the one A/A run before it, and what it could detect.
    summary = page.locator(".report table.verdicts").inner_text()
    assert "A/A flagged" in summary and "detects" in summary
    assert re.search(r"\b[01]/1\s+\(0-\d expected\)", summary), summary
    assert "Certificate:" in page.locator(".report section").first.inner_text()
    assert certificate_on_screen(page, ".report table.verdicts")
    # One numbering of trials for users, from 1 (the lab's progress line says "trial 1 of
    # 4"): the per-trial tables, the host facts; and one count: the status line's "D of N
    # trials done" is the report's "D of N trials".
    first_column = page.evaluate(
        "() => [...document.querySelectorAll('.report table')]"
        ".filter(t => t.querySelector('th') && t.querySelector('th').textContent === 'trial')"
        ".map(t => [...t.querySelectorAll('tr td:first-child')].map(td => td.textContent))"
    )
    done = re.search(r"(\d+) of (\d+) trials done", page.locator("#live").inner_text())
    meta = re.search(r"(\d+) of (\d+) trials", page.locator(".report .meta").first.inner_text())
    assert done and meta and done.groups() == meta.groups() and done[2] == "4"
    # A trial left out (its batch spoiled twice) is missing from the tables, not renumbered.
    assert first_column and all(
        len(c) == int(done[1]) and c == sorted(c) and set(c) <= {"1", "2", "3", "4"}
        for c in first_column
    ), first_column
    groups = page.locator(".facts-groups").inner_text()
    assert re.search(r"trial 1,? batch 1", groups) and not re.search(r"(trial|batch) 0\b", groups)
    # The report's charts use the column (up to 1,000 px), their axes titled with units.
    column = page.evaluate("() => document.querySelector('.report').clientWidth")
    drawn = page.eval_on_selector_all(
        ".report figure svg", "els => els.map(e => e.getBoundingClientRect().width)"
    )
    assert drawn and all(w >= 0.95 * min(column, 1000) for w in drawn), (drawn, column)
    titles = page.eval_on_selector_all(
        ".report text.axis-title", "els => els.map(e => e.textContent)"
    )
    assert (
        "cpu_ns_per_request (ns per request), per-trial mean" in titles
        and "trial (from 1)" in titles
    )
    shoot(page, tmp_path, "experiment")

    # The same verdicts in the experiment's self-contained HTML report (`hairline report
    # --html`), and in its JSON.
    report_html = tmp_path / "report.html"
    shown = subprocess.run(
        [*HAIRLINE, "report", str(regression), "--db", web_lab.db_url, "--home",
         str(web_lab.home), "--html", str(report_html), "--json", str(tmp_path / "r.json")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert shown.returncode == 1, shown.stderr  # 1: the regression
    check_schema("experiment-report", json.loads((tmp_path / "r.json").read_text()))
    cert = json.loads((tmp_path / "r.json").read_text())["analysis"]["metrics"][0]["certificate"]
    assert cert["aa_history"]["runs"] == 1 and cert["mde"] > 0, cert
    page.goto(report_html.as_uri())
    summary = page.locator("table.verdicts").inner_text()
    assert "A/A flagged" in summary and "detects" in summary
    assert re.search(r"\b[01]/1\s+\(0-\d expected\)", summary), summary
    sentence = page.locator("section p.cert").first.inner_text()
    assert re.search(r"Certificate: [01] of 1 A/A runs of this service flagged", sentence)
    assert re.search(r"this experiment detects a change of \S+ or more with 80% power", sentence)
    assert certificate_on_screen(page, "table.verdicts")
    shoot(page, tmp_path, "report-html")

    page.goto(f"{web_lab.url}/aa")
    health = page.locator("table.health tbody tr")
    assert health.count() >= 1 and "sample-web" in health.first.inner_text()
    assert page.locator("section.metric svg").count() == health.count()
    shoot(page, tmp_path, "aa")

    page.goto(f"{web_lab.url}/services/sample-web")
    assert page.locator("section.metric svg").count() >= 1
    shoot(page, tmp_path, "service")

    page.goto(f"{web_lab.url}/regressions")
    assert page.locator(f"a[href='/experiments/{regression}']").count() >= 1
    shoot(page, tmp_path, "regressions")
    page.context.close()


def test_a_running_experiments_progress_changes_on_screen_without_a_reload(
    chromium: Any, web_lab: WebLab, web_runs: dict[str, int], tmp_path: Path
) -> None:
    """False failure: about 1e-4 (not measured): each wait has 240 s for a 3-trial experiment of
    about 15 s on this machine (tests/web/conftest.py); its verdict is not checked."""
    status, answer, _ = web_lab.request(
        "POST", "/api/v1/experiments", token="demo-submit",
        body=submission(experiment_toml(trials=3)),
    )  # fmt: skip
    assert status == 201, answer
    experiment = int(answer["id"])
    try:
        page = signed_in(chromium, web_lab, "demo-read")
        row = page.locator(f"#experiment-{experiment}")
        assert row.count() == 1
        # A mark in the page's JavaScript state: a reload or a navigation would lose it.
        page.evaluate("window.stillTheSamePage = true")
        seen: list[str] = []
        deadline = time.monotonic() + LIVE_TIMEOUT_S
        while time.monotonic() < deadline:
            text = row.locator(".progress").inner_text() + " | " + row.get_attribute("data-phase")
            if not seen or seen[-1] != text:
                seen.append(text)
            if row.get_attribute("data-phase") == "running" and len(seen) >= 2:
                break
            page.wait_for_timeout(250)
        assert page.evaluate("window.stillTheSamePage") is True
        assert len(seen) >= 2, seen  # the row changed under our eyes
        shoot(page, tmp_path, "experiments-live")

        # The experiment's own page: its status line moves on, then the page shows the end.
        live = signed_in(chromium, web_lab, "demo-read")
        live.goto(f"{web_lab.url}/experiments/{experiment}")
        live.evaluate("window.stillTheSamePage = true")
        first = live.locator("#live").inner_text()
        live.wait_for_function(
            "first => document.querySelector('#live') && "
            "document.querySelector('#live').innerText !== first",
            arg=first, timeout=LIVE_TIMEOUT_S * 1000,
        )  # fmt: skip
        if live.evaluate("window.stillTheSamePage === true"):
            shoot(live, tmp_path, "experiment-live")
        # At the end the page reloads once (HX-Refresh) to show the verdicts.
        live.wait_for_selector("#live[data-phase=done]", timeout=LIVE_TIMEOUT_S * 1000)
        assert live.locator(".report .status").count() == 1
        # The list's row, never reloaded, ended too and stopped polling.
        page.wait_for_selector(
            f"#experiment-{experiment}[data-phase=done]", timeout=LIVE_TIMEOUT_S * 1000
        )
        assert page.evaluate("window.stillTheSamePage") is True
        page.context.close()
        live.context.close()
    finally:
        wait_ended(web_lab, experiment)


def test_acknowledging_a_regression_through_the_page(
    chromium: Any, web_lab: WebLab, web_runs: dict[str, int], tmp_path: Path
) -> None:
    """False failure: about 1e-3 (not measured): the session's A/B (web_runs) must be a regression
    (30% over 4 trials at 1,500/s in a duet: about eight interval half-widths past the
    threshold); the
    page waits on nothing timed."""
    regression = web_runs["regression"]
    page = signed_in(chromium, web_lab, "demo-triage")
    page.goto(f"{web_lab.url}/regressions")
    row = page.locator("table.regressions tbody tr", has=page.locator(
        f"a[href='/experiments/{regression}']"
    )).first  # fmt: skip
    metric = row.get_attribute("data-metric")
    row.locator("input[name=note]").fill("expected: the candidate does 30% more work")
    row.locator("button[value=acknowledged]").click()
    page.wait_for_load_state()
    open_rows = page.locator(f"table.regressions tr[data-metric='{metric}']", has=page.locator(
        f"a[href='/experiments/{regression}']"
    ))  # fmt: skip
    assert open_rows.count() == 0  # no longer open
    trail = page.locator("table.audit").inner_text()
    assert "triage.acknowledged" in trail and "demo-triage" in trail
    assert "30% more work" in trail
    page.click("text=Show triaged ones too")
    page.wait_for_url("**/regressions?triaged=1")
    assert page.locator(".t-acknowledged").count() >= 1
    shoot(page, tmp_path, "regressions-triaged")
    status, gate, _ = web_lab.request(
        "GET", f"/api/v1/experiments/{regression}/gate", token="demo-read"
    )
    assert status == 200 and gate["answer"] == "fail"  # acknowledged still blocks
    page.context.close()
