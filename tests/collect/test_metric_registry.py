"""The metric registry: each built-in metric declared once, and read from there by config
and the rest of the code, which writes no metric name of its own."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

from hairline.collect.metric import Direction
from hairline.collect.registry import (
    BUILTIN,
    COLLECTORS,
    LATENCY,
    MAX_THROUGHPUT,
    OPTIONAL,
    builtin_direction,
    collectors_for,
)
from hairline.config.policy import BUILTIN_DIRECTIONS

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "hairline"

# Strings that spell a metric's name but mean something else: the engine's summary JSON
# key, the Ray actor's method names, procfs.py's function names in its __all__, Kraken's
# health keys (of a production fleet's intervals, not the lab's observation rows).
NOT_METRICS = {
    ("kraken/controller.py", "error_rate"),
    ("kraken/health.py", "error_rate"),
    ("engine/results.py", "latency_us"),
    ("arms/remote.py", "anon_memory_bytes"),
    ("arms/remote.py", "peak_memory_bytes"),
    ("collect/procfs.py", "anon_memory_bytes"),
    # A calibration step's JSON field: the baseline's CPU per request at that rate.
    ("report/context/contract.py", "cpu_ns_per_request"),
}


def test_every_metric_is_declared_once_with_a_unit_a_direction_and_a_description() -> None:
    declared = [m for c in COLLECTORS for m in c.metrics] + [LATENCY, MAX_THROUGHPUT]
    names = [m.name for m in declared]

    assert len(names) == len(set(names)) == len(BUILTIN)
    assert len({c.name for c in COLLECTORS}) == len(COLLECTORS)
    for metric in declared:
        assert metric.unit and metric.description
        assert metric.direction in typing.get_args(Direction)


def test_config_reads_the_directions_from_the_registry() -> None:
    assert {name: m.direction for name, m in BUILTIN.items()} == BUILTIN_DIRECTIONS
    assert builtin_direction("goodput_per_s") == "lower-is-worse"
    assert builtin_direction("latency_p99_us[/api/feed]") == "higher-is-worse"
    # Not built in (a counter per request): the default, most things cost.
    assert builtin_direction("db_reads_total_per_request") == "higher-is-worse"


def test_optional_collectors_run_only_when_named_and_in_the_registrys_order() -> None:
    always = collectors_for()
    assert [c.name for c in always] == [c.name for c in COLLECTORS if not c.optional]
    assert collectors_for(OPTIONAL) == COLLECTORS
    assert collectors_for(["no-such-collector"]) == always


def test_no_module_outside_the_registry_spells_a_built_in_metrics_name() -> None:
    """A name written out elsewhere is a second declaration that can drift: code uses the
    registry's ``MetricSpec.name`` (``CPU_PER_REQUEST.name``)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where.startswith("collect/") and where != "collect/procfs.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Constant)
                and node.value in BUILTIN
                and (where, node.value) not in NOT_METRICS
            ):
                found.append(f"{where}:{node.lineno} {node.value!r}")
    assert found == []
