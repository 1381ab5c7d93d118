"""`POST /api/v1/events` and `GET /api/v1/events`: deployments and maintenance recorded over
HTTP, by a token that may submit; listed for any token."""

from __future__ import annotations

from weblab import WebLab


def test_a_submit_token_records_an_event_that_a_read_token_lists(web_lab: WebLab) -> None:
    body = {"kind": "deploy", "service": "127.0.0.1:5432", "host": "w2", "at": "-10m",
            "until": "-5m", "note": "schema v8"}  # fmt: skip
    status, added, _ = web_lab.request("POST", "/api/v1/events", token="demo-submit", body=body)
    assert status == 201, added
    assert (added["kind"], added["host"], added["created_by"]) == ("deploy", "w2", "demo-submit")
    assert added["ended_at"] - added["started_at"] == 300
    status, listed, _ = web_lab.request("GET", "/api/v1/events?since=-1h", token="demo-read")
    assert status == 200 and added["id"] in [e["id"] for e in listed]


def test_a_read_token_may_not_record_and_bad_fields_are_named(web_lab: WebLab) -> None:
    body = {"kind": "deploy", "service": "search"}
    status, answer, _ = web_lab.request("POST", "/api/v1/events", token="demo-read", body=body)
    assert status == 403 and "this needs 'submit'" in answer["error"]
    status, answer, _ = web_lab.request(
        "POST", "/api/v1/events", token="demo-submit",
        body={"kind": "reboot", "service": "search", "at": "soon"},
    )  # fmt: skip
    assert status == 422 and answer["error"] == "at 'soon' is not a time"
    assert "ISO 8601" in answer["hint"]
    status, answer, _ = web_lab.request(
        "POST", "/api/v1/events", token="demo-submit", body={"kind": "reboot", "service": "s"}
    )
    assert status == 422 and "kind 'reboot' is not one of deploy" in answer["error"]
