"""`hairline route partition` on the example's profile, and `route fleet`'s mistakes named by
flag (the fleet itself: tests/routing/test_route_fleet.py)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from hairline.cli import main
from schema_check import check_schema

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "routing"


def test_partition_reads_k_from_the_curve_and_writes_the_file(tmp_path: Path) -> None:
    out = tmp_path / "partitions.json"
    done = CliRunner().invoke(
        main, ["route", "partition", str(EXAMPLE / "profile.folded"), "--output", str(out)]
    )
    assert done.exit_code == 0, done.output
    assert "4 partitions, average working set 14.0 functions" in done.output
    data = json.loads(out.read_text())
    check_schema("partitions", data)
    # The sample service's op k belongs to group k % 4: each partition is one group.
    for partition in data["partitions"]:
        groups = {int(e.rsplit("/", 1)[1]) % 4 for e in partition["endpoints"]}
        assert len(groups) == 1 and partition["working_set"] == 14
    assert data == json.loads((EXAMPLE / "partitions.json").read_text())


def test_partition_with_a_fixed_k_prints_json() -> None:
    done = CliRunner().invoke(
        main, ["route", "partition", str(EXAMPLE / "profile.folded"), "--k", "2", "--json"]
    )
    assert done.exit_code == 0, done.output
    assert len(json.loads(done.output)["partitions"]) == 2
    check_schema("partitions", json.loads(done.output))


def test_a_bad_k_is_named() -> None:
    done = CliRunner().invoke(main, ["route", "partition", str(EXAMPLE / "profile.folded"),
                                     "--k", "many"])  # fmt: skip
    assert done.exit_code == 2
    assert "--k many" in done.output and "hint:" in done.output


def test_semantic_without_partitions_is_refused_before_anything_starts() -> None:
    words = ["--instances", "2", "--port", "9", "--", "svc", "--port", "{port}"]
    done = CliRunner().invoke(main, ["route", "fleet", "--policy", "semantic", *words])
    assert done.exit_code == 2
    assert "--policy semantic needs --partitions FILE" in done.output


def test_too_few_instances_for_the_partitions_is_refused() -> None:
    done = CliRunner().invoke(main, ["route", "fleet", "--policy", "semantic", "--instances",
                                     "3", "--partitions", str(EXAMPLE / "partitions.json"),
                                     "--port", "9", "--", "svc", "--port", "{port}"])  # fmt: skip
    assert done.exit_code == 2
    assert "--instances 3 cannot give each of 4 partitions a host" in done.output


def test_a_command_without_its_port_is_refused() -> None:
    done = CliRunner().invoke(main, ["route", "fleet", "--policy", "round-robin",
                                     "--instances", "2", "--port", "9", "--", "svc"])  # fmt: skip
    assert done.exit_code == 2
    assert "has no {port}" in done.output
