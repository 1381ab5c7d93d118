"""`POST /api/v1/events` and `GET /api/v1/events`: deployments and maintenance recorded over
HTTP, by a token that may submit; listed for any token."""

from __future__ import annotations

from fastapi.testclient import TestClient
from weblab import WebLab
from webseed import seed

from hairline.store.db import Store
from hairline.web.app import create_app
from hairline.web.auth import create_token
from schema_check import check_api


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


def test_another_teams_service_is_theirs_to_record_events_of(store: Store) -> None:
    """A backdated "deploy" on another team's service would put a warning in every report
    of theirs it overlaps (issue 28)."""
    seed(store, service="api", team="demo")
    client = TestClient(create_app(store))
    tokens = {name: create_token(store, name=name, team=team, scope=scope)
              for name, team, scope in [("mine", "demo", "submit"), ("theirs", "other", "submit"),
                                        ("ops", "ops", "admin")]}  # fmt: skip

    def post(token: str, service: str) -> tuple[int, dict[str, object]]:
        answer = client.post("/api/v1/events", headers={"Authorization": f"Bearer {tokens[token]}"},
                             json={"kind": "deploy", "service": service, "at": "-2h"})  # fmt: skip
        check_api("POST", "/api/v1/events", answer.status_code, answer.json())
        return answer.status_code, answer.json()

    status, refused = post("theirs", "api")
    assert status == 403 and "service 'api' is team demo's" in str(refused["error"])
    assert post("mine", "api")[0] == 201
    assert post("ops", "api")[0] == 201  # an admin records for anyone
    # A name no team has experiments of (a downstream, a host) is anyone's to record.
    assert post("theirs", "10.0.0.7:6379")[0] == 201
