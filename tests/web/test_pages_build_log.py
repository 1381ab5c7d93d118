"""A failed build on the dashboard: the lab's processor keeps the failed build's log in
the experiment's folder, the experiment's page links it, and the link serves that file
and nothing else.

    experiment = failed_build(store, tmp_path)     # processed for real; its build exits 3
    page = client.get(f"/experiments/{experiment}").text    # links build-log/B
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from hairline.config import load_experiment
from hairline.lab.context import ProcessorOptions
from hairline.lab.processor import process_experiment
from hairline.lab.queue import enqueue
from hairline.store.db import Store
from hairline.store.models import Arm
from hairline.web.app import create_app
from hairline.web.auth import create_token
from hairline.web.deps import COOKIE

EXAMPLE = Path(__file__).parents[2] / "examples" / "sample-service"
# A compiler's complaint, long as real ones are: the experiments list must not widen for it.
COMPLAINT = "error: no such symbol " + "hairline_sample_handler_" * 12


def failed_build(store: Store, folder: Path) -> int:
    """A sample-service A/B whose arms are built from a folder: A's build works, B's fails
    (its env sets FAIL); enqueued and processed (the processor stops at B's build)."""
    shutil.copy(EXAMPLE / "trace.jsonl", folder / "trace.jsonl")
    source = folder / "src"
    source.mkdir()
    (source / "build.sh").write_text(
        f"echo compiling\nif [ -n \"$FAIL\" ]; then echo '{COMPLAINT}' >&2; exit 3; fi\nmkdir out\n"
    )
    service = (EXAMPLE / "service.toml").read_text()
    service = service.replace(
        "[service.metrics]",
        '[service.build]\ncommand = "sh build.sh"\nartifact = "out"\n\n[service.metrics]',
    )
    (folder / "service.toml").write_text(service)
    (folder / "experiment.toml").write_text(
        'service = "service.toml"\ntrace = "trace.jsonl"\nteam = "demo"\n\n'
        '[arms.A]\npath = "src"\n\n[arms.B]\npath = "src"\nenv = { FAIL = "1" }\n\n'
        "[load]\nrate_per_s = 100\nduration_s = 1\n"
    )
    experiment = enqueue(store, load_experiment(folder / "experiment.toml"))
    outcome = process_experiment(
        store, experiment, ProcessorOptions(owner="test", cache_dir=folder / "builds")
    )
    assert outcome == "failed"
    return experiment


@pytest.fixture
def client(store: Store) -> TestClient:
    browser = TestClient(create_app(store))
    browser.cookies.set(COOKIE, create_token(store, name="reader", team="demo", scope="read"))
    return browser


def test_a_failed_builds_page_links_its_build_log(
    store: Store, client: TestClient, tmp_path: Path
) -> None:
    experiment = failed_build(store, tmp_path)
    with store.transaction() as session:
        (arm,) = session.query(Arm).filter_by(experiment_id=experiment, name="B").all()
        kept = Path(arm.build_log or "")
    # Kept in the experiment's own folder, not only in the build cache shared by all.
    assert kept.parent == store.home / "experiments" / str(experiment) and kept.is_file()
    page = client.get(f"/experiments/{experiment}").text
    assert "No arm was built" not in page
    link = f"/experiments/{experiment}/build-log/B"
    assert re.search(
        rf'arm B: <a href="{link}">build log</a> <span[^>]*>\(the build failed\)', page
    )
    log = client.get(link)
    assert log.status_code == 200 and log.headers["content-type"].startswith("text/plain")
    assert "exit status 3" in log.text and COMPLAINT in log.text
    # A's build worked: its log is the build cache's, linked without the mark.
    assert re.search(
        rf'arm A: <a href="/experiments/{experiment}/build-log/A">build log</a></li>', page
    )
    # Nothing else is served: an arm that does not exist, a path in an arm's place.
    assert client.get(f"/experiments/{experiment}/build-log/C").status_code == 404
    assert (
        client.get(f"/experiments/{experiment}/build-log/..%2F..%2Fhairline.db").status_code == 404
    )


def test_the_experiments_list_keeps_a_long_failure_to_one_clamped_cell(
    store: Store, client: TestClient, tmp_path: Path
) -> None:
    experiment = failed_build(store, tmp_path)
    page = client.get("/experiments").text
    (cell,) = re.findall(r'<td class="l progress failure"[^>]*>.*?</td>', page, flags=re.S)
    # The whole reason is in the cell's title (and on the experiment's page), the cell
    # itself is clamped by the style sheet (tests/web/test_browser_layout.py measures it).
    assert COMPLAINT in cell and f'href="/experiments/{experiment}"' in cell
