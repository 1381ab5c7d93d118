"""The dashboard's layout as a new user sees it, in a real headless Chromium 1,300 px wide
against a real `hairline serve` over a store filled as the lab leaves it: a failed
build's long error does not push the experiments list sideways, the charts use the page's
width and title their axes with units, /services is a table, the A/A page names the model
chosen from the A/A runs, and a failed build's page links its log.

The screenshots are written under the test's tmp_path (docs/img/ holds copies).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_browser import chromium, shoot
from test_pages_build_log import COMPLAINT, failed_build
from weblab import WebLab, served
from webseed import observe, seed

from hairline.store.db import open_store
from hairline.web.auth import create_token

pytestmark = pytest.mark.slow
__all__ = ["chromium"]  # the browser fixture, shared with test_browser.py

# The width the new user had (#31): the page is wider than main's 1,180 px column.
VIEWPORT = {"width": 1300, "height": 900}
SCORING_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WebLab, int]]:
    """A served store: eight A/A runs and twelve A/Bs of service "api" (the last a
    regression) with observations, and a sample-service A/B whose build failed; the
    failed experiment's id."""
    folder = tmp_path_factory.mktemp("layout")
    home = folder / "lab"
    db_url = f"sqlite:///{home / 'hairline.db'}"
    store = open_store(db_url, home=home)
    try:
        rng = np.random.default_rng(13)
        for i in range(8):
            observe(store, seed(store, kind="aa", trials=6, at=1.0e9 + i), folder, rng=rng)
        for i in range(12):
            effect = 0.05 if i == 11 else float(rng.normal(0, 0.003))
            label = "regression" if i == 11 else "no change"
            seed(store, effect=effect, label=label, trials=6, at=1.1e9 + i)
        failed = failed_build(store, folder)
        token = create_token(store, name="reader", team="demo", scope="read")
    finally:
        store.close()
    with served(db_url, home, folder / "serve.log", {"reader": token}) as lab_served:
        yield lab_served, failed


@pytest.fixture
def page(chromium: Any, lab: tuple[WebLab, int]) -> Iterator[Any]:
    served, _ = lab
    context = chromium.new_context(viewport=VIEWPORT)
    tab = context.new_page()
    tab.goto(served.url + "/experiments")
    tab.fill("input[name=token]", served.tokens["reader"])
    tab.click("button[type=submit]")
    tab.wait_for_url("**/experiments")
    yield tab
    context.close()


def widths(page: Any, selector: str) -> list[float]:
    return list(page.eval_on_selector_all(
        selector, "els => els.map(e => e.getBoundingClientRect().width)"
    ))  # fmt: skip


def column_px(page: Any) -> float:
    """The width of main's content box: what a chart may use."""
    return float(page.evaluate(
        "() => { const m = document.querySelector('main'); const s = getComputedStyle(m);"
        " return m.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight); }"
    ))  # fmt: skip


def axis_titles(page: Any, selector: str) -> list[str]:
    return list(page.eval_on_selector_all(
        f"{selector} text.axis-title", "els => els.map(e => e.textContent)"
    ))  # fmt: skip


def test_a_failed_builds_long_error_does_not_push_the_list_sideways(
    page: Any, lab: tuple[WebLab, int], tmp_path: Path
) -> None:
    """False failure: none: nothing timed; the page is laid out from fixed rows."""
    served, failed = lab
    row = page.locator(f"#experiment-{failed}")
    assert row.get_attribute("data-phase") == "failed"
    table = page.locator("table.list")
    scroll, client = table.evaluate("t => [t.scrollWidth, t.clientWidth]")
    assert scroll <= client  # no column pushed off the table
    page_scroll, page_width = page.evaluate(
        "() => [document.documentElement.scrollWidth, window.innerWidth]"
    )
    assert page_scroll <= page_width  # the page does not scroll sideways
    # The reason is clamped to three lines; the whole of it is the cell's title.
    cell = row.locator("td.failure")
    line_px = float(cell.evaluate("c => parseFloat(getComputedStyle(c).lineHeight)"))
    assert cell.locator(".clamp").evaluate("c => c.getBoundingClientRect().height") <= (
        3 * line_px + 1
    )
    assert COMPLAINT in (cell.get_attribute("title") or "")
    # The gate column is still on screen, right of the reason.
    gate = row.locator(".gate").bounding_box()
    assert gate is not None and gate["x"] + gate["width"] <= VIEWPORT["width"]
    shoot(page, tmp_path, "dashboard-experiments-failed-build")

    # Its page links the build log, which is the failed build's own output.
    row.locator(f"a[href='/experiments/{failed}']").first.click()
    page.wait_for_url(f"**/experiments/{failed}")
    link = page.locator(f"a[href='/experiments/{failed}/build-log/B']")
    assert link.count() == 1 and "the build failed" in page.locator("#build-logs + ul").inner_text()
    page_scroll, page_width = page.evaluate(
        "() => [document.documentElement.scrollWidth, window.innerWidth]"
    )
    assert page_scroll <= page_width  # its status line and failure wrap the long word too
    shoot(page, tmp_path, "dashboard-failed-build")
    answer = page.request.get(served.url + f"/experiments/{failed}/build-log/B")
    assert answer.status == 200 and COMPLAINT in answer.text()


def test_charts_use_the_width_and_title_their_axes(
    page: Any, lab: tuple[WebLab, int], tmp_path: Path
) -> None:
    """False failure: none known: the histories are drawn from seeded generators; the A/A
    page's model choice must be scored within 60 s (under a second here)."""
    served, _ = lab
    page.goto(served.url + "/services/api")
    column = column_px(page)
    drawn = widths(page, "section.metric svg")
    assert drawn and all(w >= 0.95 * column for w in drawn), (drawn, column)
    assert axis_titles(page, "section.metric") == [
        "A/B experiment (oldest left)", "relative effect (%)"
    ]  # fmt: skip
    shoot(page, tmp_path, "dashboard-service")

    page.goto(served.url + "/aa")
    # The page waits 2 s for the model choice, then reloads itself every 5 s until it is
    # there (8 runs of one aggregate metric: well under a second here).
    deadline = time.monotonic() + SCORING_TIMEOUT_S
    while page.locator(".scoring").count() and time.monotonic() < deadline:
        page.wait_for_timeout(500)
        page.goto(served.url + "/aa")
    drawn = widths(page, "section.metric svg")
    assert drawn and all(w >= 0.95 * column for w in drawn), (drawn, column)
    assert "false positives (%)" in axis_titles(page, "section.metric")
    model = page.locator("table.health td.model").first.inner_text()
    assert "best of 8 A/A runs" in model, model
    shoot(page, tmp_path, "dashboard-aa")


def test_the_services_page_is_a_table_with_links(
    page: Any, lab: tuple[WebLab, int], tmp_path: Path
) -> None:
    """False failure: none: nothing timed."""
    served, failed = lab
    page.goto(served.url + "/services")
    api = page.locator("#service-api td")
    # 8 A/As and 12 A/Bs; the newest (#20) done; one open regression.
    assert [api.nth(i).inner_text().strip() for i in (1, 2, 4)] == ["20", "8", "1"]
    assert api.nth(3).inner_text().startswith("#20 done")
    sample = page.locator("#service-sample-service td")
    assert sample.nth(3).inner_text().startswith(f"#{failed} failed")
    page.click("#service-api a[href='/services/api']")
    page.wait_for_url("**/services/api")
    page.goto(served.url + "/services")
    shoot(page, tmp_path, "dashboard-services")
