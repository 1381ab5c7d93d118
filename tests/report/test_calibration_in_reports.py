"""The calibrated rate, its choice and its reason, as every renderer shows them: the note in
the terminal, Markdown and HTML, and the ``calibration`` object in the JSON."""

from __future__ import annotations

import json

from report_fixture import make_report
from rich.console import Console

from hairline.lab.calibrate import Calibration, CalibrationStep, calibration_from_dict
from hairline.lab.rate_choice import CandidateRate, choose_rate
from hairline.report.context import experiment_json
from hairline.report.experiment import calibration_note
from hairline.report.html import render_html
from hairline.report.markdown import render_markdown
from hairline.report.terminal import print_experiment
from schema_check import check_schema

HOST0_BUSY = "host 0's CPUs with the engine 93% busy (limit 90%)"
RAMP = (
    CalibrationStep(400.0, 0.1, 52_000.0, True),
    CalibrationStep(1600.0, 0.38, 48_000.0, True),
    CalibrationStep(3700.0, 0.0, 0.0, False, HOST0_BUSY),
    CalibrationStep(2430.0, 0.57, 47_000.0, True),
    CalibrationStep(3000.0, 0.7, 46_500.0, True),
)
CANDIDATES = (
    CandidateRate(1260.0, 0.3, 6, 0.011, True),
    CandidateRate(1950.0, 0.46, 6, 0.006, True, "", (0.15, 0.16, 0.15, 0.14, 0.15, 0.16)),
    CandidateRate(2700.0, 0.0, 3, None, False, HOST0_BUSY),
)


def precision_calibration() -> Calibration:
    choice = choose_rate(CANDIDATES, metric="cpu_ns_per_request", step_s=1.0)
    assert choice is not None
    return Calibration(
        rate_per_s=choice.rate_per_s,
        target_utilization=None,
        steps=RAMP,
        metric="cpu_ns_per_request",
        candidates=CANDIDATES,
        aa_step_s=1.0,
        reason=choice.reason,
        seconds=31.4,
    )


def test_the_note_gives_the_rate_the_candidates_noise_what_was_left_out_and_the_time() -> None:
    note = calibration_note(precision_calibration())
    assert note == (
        "rate calibrated to 1950 requests/s: cpu_ns_per_request most precise per minute of "
        "1,260/1,950/s (A/A sd 1.10%, 0.60% per pair of 1 s steps, 6 steps each); 2,700/s "
        f"left out: {HOST0_BUSY}; the highest rate served with every gate holding was "
        f"3,000/s (3,700/s failed: {HOST0_BUSY}); calibration took 31.4 s"
    )


def test_a_calibration_stored_before_precision_reads_and_reads_as_before() -> None:
    """A row written by the utilisation-only calibration: no metric, candidates or time."""
    stored = {
        "rate_per_s": 2554.0,
        "target_utilization": 0.6,
        "steps": [
            {"rate_per_s": 400.0, "utilization": 0.1, "cpu_ns_per_request": 5e4,
             "passed": True, "note": ""},
            {"rate_per_s": 2554.0, "utilization": 0.31, "cpu_ns_per_request": 4.6e4,
             "passed": True, "note": ""},
        ],
    }  # fmt: skip
    calibration = calibration_from_dict(json.loads(json.dumps(stored)))
    assert calibration.candidates == () and calibration.reason == ""
    assert calibration_note(calibration) == (
        "rate calibrated to 2554 requests/s for 60% busy in 2 steps; the baseline reached "
        "only 31% busy at the highest rate the load stayed valid (the engine, or the service, "
        "could go no faster): set a lower target_utilization, or none to calibrate for "
        "precision"
    )
    # What a calibration writes reads back whole.
    fresh = precision_calibration()
    assert calibration_from_dict(json.loads(json.dumps(fresh.as_dict()))) == fresh


def test_every_renderer_shows_the_choice_and_the_json_holds_it() -> None:
    calibration = precision_calibration()
    note = calibration_note(calibration)
    report = make_report(calibration=calibration, notes=(note,), rate_per_s=1950.0)

    console = Console(record=True, width=400)
    print_experiment(report, console)
    assert "cpu_ns_per_request most precise per minute of 1,260/1,950/s" in console.export_text()
    assert "most precise per minute of 1,260/1,950/s" in render_markdown(report)
    assert "most precise per minute of 1,260/1,950/s" in render_html(report)

    payload = json.loads(json.dumps(experiment_json(report), allow_nan=False))
    check_schema("experiment-report", payload)
    found = payload["calibration"]
    assert found["mode"] == "precision" and found["rate_per_s"] == 1950.0
    assert found["metric"] == "cpu_ns_per_request"
    assert found["servable_rate_per_s"] == 3000.0 and found["seconds"] == 31.4
    assert [(c["rate_per_s"], c["sd_per_trial_rel"], c["passed"]) for c in found["candidates"]] == [
        (1260.0, 0.011, True),
        (1950.0, 0.006, True),
        (2700.0, None, False),
    ]
    assert found["reason"] == calibration.reason
    assert note in payload["notes"]
    assert experiment_json(make_report())["calibration"] is None
