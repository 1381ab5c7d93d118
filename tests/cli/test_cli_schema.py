"""`hairline schema`: the published JSON Schemas (docs/schema/*.json) are the models' own,
every example file validates against its kind's, and so do the files the tests write.

Every JSON output is checked where a test already makes it (tests/schema_check.py): the
lab's end-to-end tests, the CLI tests of each command, the HTTP API tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.routing import APIRoute
from jsonschema import Draft202012Validator

from hairline.cli import EXIT_ERROR, main
from hairline.cli.schema import KINDS, kind_named
from hairline.web.api import router
from schema_check import SCHEMA_DIR, api_answer_model, check_api, check_schema, check_toml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

# Every file under examples/ that hairline reads or writes, and its kind.
EXAMPLE_KINDS = {
    "kraken/cluster.toml": "kraken",
    "kraken/server.toml": "kraken",
    "kraken/nginx.toml": "kraken",
    "kraken/health.toml": "kraken-health",
    "nginx-config/experiment.toml": "experiment",
    "nginx-config/experiment-quarter.toml": "experiment",
    "nginx-config/service.toml": "service",
    "nginx-config/service-quarter.toml": "service",
    "nginx-gzip/experiment.toml": "experiment",
    "nginx-gzip/service.toml": "service",
    "routing/experiment.toml": "experiment",
    "routing/service.toml": "service",
    "routing/partitions.json": "partitions",
    "sample-service/attribute-experiment.toml": "experiment",
    "sample-service/attribute.toml": "attribute",
    "sample-service/capacity.toml": "experiment",
    "sample-service/experiment.toml": "experiment",
    "sample-service/functions.toml": "experiment",
    "sample-service/profiled-service.toml": "service",
    "sample-service/service.toml": "service",
    "sample-service/three-sided.toml": "experiment",
    "sample-service/tune-experiment.toml": "experiment",
    "sample-service/tune.toml": "tune",
    "suggest/experiment.toml": "experiment",
    "suggest/service.toml": "service",
}


def test_the_published_schemas_are_the_models_own() -> None:
    """docs/schema/*.json is what `hairline schema --out docs/schema` writes now: a model
    changed without the schema (or the reverse) fails here, naming the file."""
    stale = [k.name for k in KINDS if (SCHEMA_DIR / f"{k.name}.json").read_text() != k.text()]
    assert stale == [], f"stale: {stale}; run `hairline schema --out docs/schema`"
    published = {p.stem for p in SCHEMA_DIR.glob("*.json")}
    assert published == {k.name for k in KINDS}, "a schema file no kind writes"


def test_each_schema_is_valid_2020_12_and_says_what_it_is() -> None:
    for kind in KINDS:
        schema = json.loads((SCHEMA_DIR / f"{kind.name}.json").read_text())
        Draft202012Validator.check_schema(schema)
        assert schema["$id"] == f"urn:hairline:schema:{kind.name}"
        assert schema["title"].startswith("hairline ") and schema["description"]


def test_fields_carry_their_docstrings_as_descriptions() -> None:
    experiment = json.loads((SCHEMA_DIR / "experiment.json").read_text())
    load = experiment["$defs"]["LoadConfig"]["properties"]
    assert load["duration_s"]["description"] == "How long each batch replays the trace, in seconds."
    assert load["duration_s"]["exclusiveMinimum"] == 0
    # The reader's own fields are not the file's.
    assert "source" not in experiment["properties"]
    assert "root" not in experiment["$defs"]["ServiceConfig"]["properties"]
    report = json.loads((SCHEMA_DIR / "experiment-report.json").read_text())
    assert "bumped when a key changes meaning" in report["properties"]["schema"]["description"]


def test_every_example_file_validates_against_its_kind() -> None:
    found = {
        p.relative_to(EXAMPLES).as_posix()
        for p in EXAMPLES.rglob("*")
        if p.suffix in (".toml", ".json") and "site" not in p.parts  # nginx's pages
    }
    assert found == set(EXAMPLE_KINDS), "give each new example file its kind here"
    for name, kind in EXAMPLE_KINDS.items():
        path = EXAMPLES / name
        if path.suffix == ".json":
            check_schema(kind, json.loads(path.read_text()))
        else:
            check_toml(kind, path)


def test_a_mistake_in_a_file_fails_its_schema_as_it_fails_the_reader(tmp_path: Path) -> None:
    bad = tmp_path / "experiment.toml"
    text = (EXAMPLES / "sample-service" / "experiment.toml").read_text()
    bad.write_text(text.replace("duration_s = 4", "duration_s = -4\ndurtion_s = 4"))
    with pytest.raises(AssertionError) as found:
        check_toml("experiment", bad)
    assert "at /load/duration_s: -4 is less than or equal to the minimum of 0" in str(found.value)
    assert "'durtion_s' was unexpected" in str(found.value)


def test_an_output_with_a_key_no_schema_names_or_a_wrong_type_fails() -> None:
    """The tests check outputs against closed schemas: a key added to a writer without its
    type fails them, as a value of the wrong type does."""
    partitions = json.loads((EXAMPLES / "routing" / "partitions.json").read_text())
    check_schema("partitions", partitions)
    with pytest.raises(AssertionError, match="'cost' was unexpected"):
        check_schema("partitions", {**partitions, "cost": 1})
    partitions["partitions"][0]["working_set"] = "14"
    with pytest.raises(AssertionError, match="at /partitions/0/working_set: '14' is not"):
        check_schema("partitions", partitions)


def test_an_api_answer_is_checked_against_its_routes_model() -> None:
    gate = {"id": 3, "answer": "pass", "gate": "pass", "judge": "gate", "score": None,
            "phase": "done", "progress": "", "reason": "no regression", "regressions": [],
            "inconclusive": [], "deciding": 2, "inconclusive_passes": False,
            "scorecard": None}  # fmt: skip
    check_api("GET", "/api/v1/experiments/3/gate", 200, gate)
    with pytest.raises(AssertionError, match="'maybe' is not one of"):
        check_api("GET", "/api/v1/experiments/3/gate", 200, {**gate, "answer": "maybe"})
    check_api("GET", "/api/v1/experiments/3/gate", 404, {"error": "no experiment 3"})
    with pytest.raises(AssertionError, match="'error' is a required property"):
        check_api("GET", "/api/v1/experiments/3/gate", 404, {"detail": "Not Found"})


def test_every_api_route_answers_a_model_of_the_api_schema() -> None:
    api = json.loads((SCHEMA_DIR / "api.json").read_text())["$defs"]
    for route in router.routes:
        assert isinstance(route, APIRoute)
        for method in route.methods:
            found = api_answer_model(method, route.path.replace("{", "").replace("}", ""))
            assert found is not None, route.path
            name, _ = found
            assert name is None or name in api, f"{method} {route.path}: {name} not in api.json"
            for code in route.responses:
                if str(code).isdigit():
                    declared = api_answer_model(method, route.path, int(code))
                    assert declared is not None and declared[0] in api, (route.path, code)
    assert {"ErrorOut", "SubmitBody", "GateOut"} <= set(api)


def test_schema_lists_prints_writes_and_checks(tmp_path: Path) -> None:
    runner = CliRunner()
    listed = runner.invoke(main, ["schema"])
    assert listed.exit_code == 0, listed.output
    assert "experiment-report  hairline experiment report" in listed.output
    printed = runner.invoke(main, ["schema", "tune"])
    assert printed.output == (SCHEMA_DIR / "tune.json").read_text()

    written = runner.invoke(main, ["schema", "--out", str(tmp_path), "kraken", "bisection"])
    assert written.exit_code == 0, written.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bisection.json", "kraken.json"]
    assert runner.invoke(main, ["schema", "--check", str(tmp_path), "kraken"]).exit_code == 0
    (tmp_path / "kraken.json").write_text("{}\n")
    stale = runner.invoke(main, ["schema", "--check", str(tmp_path), "kraken", "bisection"])
    assert stale.exit_code == EXIT_ERROR
    assert f"stale or missing in {tmp_path}: kraken\n" in stale.output

    unknown = runner.invoke(main, ["schema", "experiment-reprot"])
    assert (
        unknown.exit_code == EXIT_ERROR and "no schema kind 'experiment-reprot'" in unknown.output
    )


def test_every_kind_is_found_by_name() -> None:
    assert all(kind_named(k.name) is k for k in KINDS)
    assert kind_named("nothing") is None
