"""The API's documents: the OpenAPI document says how to authenticate, Swagger UI comes
from the package (a lab without internet sees it), and both need a token as the API does."""

from __future__ import annotations

from fastapi.testclient import TestClient

from hairline.store.db import Store
from hairline.web.app import create_app
from hairline.web.auth import create_token
from hairline.web.deps import COOKIE


def test_the_docs_need_a_token_describe_the_bearer_scheme_and_load_nothing_remote(
    store: Store,
) -> None:
    client = TestClient(create_app(store))
    assert client.get("/api/v1/openapi.json").status_code == 401
    page = client.get("/api/v1/docs")
    assert page.status_code == 401 and "Sign in" in page.text  # a browser gets the login page
    assert client.get("/healthz").status_code == 200  # the one route open to all

    token = create_token(store, name="reader", team="demo", scope="read")
    document = client.get("/api/v1/openapi.json", headers={"Authorization": f"Bearer {token}"})
    assert document.status_code == 200
    schema = document.json()
    assert schema["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert schema["security"] == [{"bearer": []}]
    assert "/api/v1/experiments/{experiment_id}/gate" in schema["paths"]

    client.cookies.set(COOKIE, token)
    html = client.get("/api/v1/docs").text
    assert "/static/vendor/swagger-ui-bundle.js" in html and "/api/v1/openapi.json" in html
    assert "cdn" not in html.lower() and "https://" not in html
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css"):
        assert client.get(f"/static/vendor/{asset}").status_code == 200


def test_every_operation_declares_the_user_errors_it_may_answer(store: Store) -> None:
    """Schemathesis found 20 operations answering 400/401/404/422 that their OpenAPI entries
    did not list (bench/web/fuzz.py): each now lists them, with the error's shape."""
    client = TestClient(create_app(store))
    token = create_token(store, name="reader", team="demo", scope="read")
    schema = client.get("/api/v1/openapi.json", headers={"Authorization": f"Bearer {token}"})
    document = schema.json()
    operations = [op for path in document["paths"].values() for op in path.values()]
    assert len(operations) >= 13
    for operation in operations:
        declared = set(operation["responses"])
        assert {"400", "401", "403", "404", "422", "429"} <= declared, operation["operationId"]
        error = operation["responses"]["401"]["content"]["application/json"]["schema"]
        assert error == {"$ref": "#/components/schemas/ErrorOut"}
    fields = document["components"]["schemas"]["ErrorOut"]["properties"]
    assert {"error", "hint", "problems"} <= set(fields)


def test_what_the_fuzzer_broke_now_answers_in_the_apis_error_shape(store: Store) -> None:
    """bench/web/fuzz.py (schemathesis, 2026-11-28): an experiment id past 64 bits was a 500
    (the database driver overflowed), and a method a path does not take answered
    {"detail": ...} without the error and hint every other 4xx has."""
    client = TestClient(create_app(store))
    token = create_token(store, name="admin", team="demo", scope="admin")
    auth = {"Authorization": f"Bearer {token}"}
    too_big = "/api/v1/experiments/18446744073709551617"
    for method, path in (("GET", too_big), ("POST", f"{too_big}/cancel"),
                         ("GET", f"{too_big}/gate"), ("GET", f"{too_big}/report.md")):  # fmt: skip
        answer = client.request(method, path, headers=auth)
        assert answer.status_code == 422, (path, answer.text)
        assert answer.json()["problems"][0]["field"] == "path.experiment_id"
    refused = client.request("TRACE", "/api/v1/events", headers=auth)
    assert refused.status_code == 405
    assert refused.json()["error"] == "Method Not Allowed" and "Allow" in refused.json()["hint"]
    # A path with two routes (the list and the submission): Allow names both (ST205).
    refused = client.request("DELETE", "/api/v1/experiments", headers=auth)
    assert refused.status_code == 405
    assert {"GET", "POST"} <= set(refused.headers["allow"].split(", ")), refused.headers
