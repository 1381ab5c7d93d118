"""Tokens against the real server: no token, a revoked one and a read token's limits."""

from __future__ import annotations

import json
import subprocess

from weblab import HAIRLINE, WebLab, http

from schema_check import check_schema


def hairline(web_lab: WebLab, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*HAIRLINE, *args, "--db", web_lab.db_url, "--home", str(web_lab.home)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_the_health_check_needs_no_token_and_everything_else_does(web_lab: WebLab) -> None:
    assert web_lab.request("GET", "/healthz")[0] == 200
    for method, path in [("GET", "/api/v1/experiments"), ("GET", "/api/v1/services"),
                         ("GET", "/api/v1/experiments/1/gate"),
                         ("POST", "/api/v1/experiments/1/cancel")]:  # fmt: skip
        status, body, headers = web_lab.request(method, path)
        assert status == 401, (path, body)
        assert headers["www-authenticate"] == "Bearer"
        assert "hairline token create" in body["error"]
    status, _, _ = http("GET", web_lab.url + "/api/v1/experiments", token="hl_not-a-token")
    assert status == 401


def test_a_revoked_token_is_refused_at_once(web_lab: WebLab) -> None:
    made = hairline(web_lab, "token", "create", "--team", "demo", "--scope", "read",
                    "--name", "ci-bot")  # fmt: skip
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert "not shown again" in made.stderr and token.startswith("hl_")
    assert http("GET", web_lab.url + "/api/v1/experiments", token=token)[0] == 200

    assert hairline(web_lab, "token", "revoke", "ci-bot").returncode == 0
    assert http("GET", web_lab.url + "/api/v1/experiments", token=token)[0] == 401
    listed = hairline(web_lab, "token", "list")
    assert any(line.startswith("ci-bot\t") and "revoked" in line
               for line in listed.stdout.splitlines())  # fmt: skip
    as_json = json.loads(hairline(web_lab, "token", "list", "--json").stdout)
    check_schema("tokens", as_json)
    assert {"name": "ci-bot", "revoked": True}.items() <= next(
        t for t in as_json if t["name"] == "ci-bot"
    ).items()
    again = hairline(web_lab, "token", "revoke", "ci-bot")
    assert again.returncode == 2 and "no live token named 'ci-bot'" in again.stderr


def test_scopes_are_ordered(web_lab: WebLab) -> None:
    status, body, _ = web_lab.request("POST", "/api/v1/experiments", token="demo-read",
                                      body={"experiment": ""})  # fmt: skip
    assert status == 403 and "needs 'submit'" in body["error"]
    status, body, _ = web_lab.request("GET", "/api/v1/services/x/commands", token="demo-submit")
    assert status == 403 and "needs 'admin'" in body["error"]
