"""A Kraken test file: the servers under test and how the test moves (``[test]``), the load
balancer (``[lb]``), the users' steady traffic (``[traffic]``) and the health file it names
(docs/kraken.md). Both files are checked in one round: every problem by file, line and field.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator

from hairline.config.sections import TomlModel
from hairline.config.tomlcheck import Problems, Report, read_toml
from hairline.kraken.control import Policy
from hairline.kraken.health import HealthMetric, Level, check_health_file
from hairline.kraken.querycheck import several_values, unknown_instances

__all__ = [
    "KrakenFile",
    "KrakenTest",
    "LbTable",
    "TestTable",
    "TrafficTable",
    "check_servers",
    "load_kraken_file",
]

_STEP_LEVELS = (Level.BOLD, Level.MODERATE, Level.CAUTIOUS)
_SERVER_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def _default_steps() -> dict[str, float]:
    return {level.name: step for level, step in Policy().steps.items()}


class TestTable(TomlModel):
    """``[test]``. ``kind = "cluster"`` measures the servers as one; ``"server"`` each
    server's capacity by its queueing delay reaching ``queue_limit_ms`` (Kraken 5.1.1).
    ``steps`` are shares of all traffic (0.15 for 15 points) per level below NOMORE.
    ``per_server_capacity_per_s``: a server's capacity from an earlier server test, for the
    theoretical cluster capacity (that times the servers); without it the test measures it."""

    __test__ = False  # not a pytest test class, despite its name

    kind: Literal["cluster", "server"] = "cluster"
    """"cluster": the servers as one; "server": each server's capacity by queueing delay."""
    servers: tuple[str, ...] = Field(min_length=1)
    """The HAProxy server names under test."""
    control_interval_s: float = Field(default=2.0, gt=0)
    """A decision (and a weight change) this often, in seconds."""
    sample_interval_s: float = Field(default=0.5, gt=0)
    """Metrics scraped, and the engine's interval, this often, in seconds."""
    max_duration_s: float = Field(default=300.0, gt=0)
    """Stop here whatever the metrics say, in seconds."""
    start_share: float | None = Field(default=None, ge=0, le=1)
    """The share the test starts at (default: the share the original weights give)."""
    hold_intervals: int = Field(default=3, ge=1)
    """NOMORE this many intervals in a row: capacity reached."""
    max_backoffs: int = Field(default=2, ge=1)
    """The BACKOFF that makes this many stops the test."""
    steps: dict[str, float] = Field(default_factory=_default_steps)
    """The share's step per level below NOMORE: BOLD, MODERATE, CAUTIOUS (0.15: 15
    points)."""
    near_step: float = Field(default=0.01, gt=0, le=1)
    """The step when any metric is within ``near_fraction`` of its threshold."""
    near_fraction: float = Field(default=0.10, ge=0, lt=1)
    """How close to its threshold (the low end of NOMORE) a metric is near it."""
    queue_limit_ms: float = Field(default=20.0, gt=0)
    """Server tests: a server's capacity is where its mean queueing delay crosses this."""
    per_server_capacity_per_s: float | None = Field(default=None, gt=0)
    """A server's capacity from an earlier server test; cluster tests then skip theirs."""


class LbTable(TomlModel):
    """``[lb]``: the load balancer, where it is (``--local-fleet`` fills that in) and the
    backend whose servers' weights the test moves. HAProxy: its admin socket. nginx: its
    main configuration and the file holding the upstream block, which hairline rewrites
    and reloads (docs/kraken.md, "nginx as the load balancer")."""

    kind: Literal["haproxy", "nginx"] = "haproxy"
    """The load balancer: "haproxy" (its runtime API) or "nginx" (an upstream file and a
    graceful reload)."""
    socket: str | None = Field(default=None, min_length=1)
    """HAProxy's ``stats socket ... level admin``; ``--local-fleet`` fills it in."""
    backend: str = Field(min_length=1)
    """The HAProxy backend, or the nginx ``upstream`` block, whose servers' weights move."""
    config: str | None = Field(default=None, min_length=1)
    """nginx: its main configuration (what ``nginx -c`` takes); ``--local-fleet`` fills it
    in."""
    upstream_file: str | None = Field(default=None, min_length=1)
    """nginx: the file holding the upstream block (one named server a line), which the
    main configuration includes and hairline rewrites; ``--local-fleet`` fills it in."""


class TrafficTable(TomlModel):
    """``[traffic]``: the users' steady traffic the engine sends through the load balancer
    (``url``, its frontend; ``--local-fleet`` fills it in); without ``trace``, the bundled
    sample trace."""

    rate_per_s: float = Field(gt=0)
    """The users' steady traffic, from the engine, in requests a second."""
    trace: str | None = Field(default=None, min_length=1)
    """The trace the engine replays, relative to this file (default: a generated
    sample-service trace)."""
    url: str | None = None
    """HAProxy's frontend, http://HOST:PORT; ``--local-fleet`` fills it in."""

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^\s/]+", value):
            raise ValueError(
                f"{value!r} is not an http:// address: write the frontend's, e.g. http://10.0.0.1:8080"
            )
        return value


class KrakenFile(TomlModel):
    """A Kraken test file as written (docs/kraken.md, "The test file")."""

    health: str = Field(min_length=1)
    """The health metrics' file, relative to this one (docs/kraken.md, "Health
    metrics")."""
    test: TestTable
    """``[test]``: the servers under test and how the share moves."""
    lb: LbTable
    """``[lb]``: the load balancer whose weights move."""
    traffic: TrafficTable
    """``[traffic]``: the users' steady traffic."""


@dataclass(frozen=True)
class KrakenTest:
    """A checked Kraken test file; ``lb``'s paths, ``traffic.trace`` and ``health_path`` are
    absolute (relative ones are taken from the file's folder)."""

    path: Path
    test: TestTable
    lb: LbTable
    traffic: TrafficTable
    health_path: Path
    health: tuple[HealthMetric, ...]

    def policy(self, *, max_share: float = 1.0) -> Policy:
        """How the share moves, from ``[test]``."""
        t = self.test
        return Policy(
            steps={level: t.steps[level.name] for level in _STEP_LEVELS},
            near_step=t.near_step,
            near_fraction=t.near_fraction,
            hold_intervals=t.hold_intervals,
            max_backoffs=t.max_backoffs,
            max_share=max_share,
        )


_HINT = 'fix each line above; docs/kraken.md describes both files ("Health metrics" the second)'


def load_kraken_file(path: Path) -> KrakenTest:
    """Read and check a Kraken test file and its health file; a :class:`ConfigError` lists
    every problem of both at once."""
    problems = Problems()
    text, data = read_toml(path, problems)
    if problems:
        problems.raise_if_any(path, _HINT)
    here = path.parent.resolve()
    health_path: Path | None = None
    health: tuple[HealthMetric, ...] = ()
    if isinstance(data.get("health"), str) and data["health"]:
        health_path = here / data["health"]
        health = check_health_file(health_path, problems, field="health")
    try:
        parsed = KrakenFile.model_validate(data)
    except ValidationError as err:
        problems.validation(path, text, err, _known_fields)
        problems.raise_if_any(path, _HINT)
        raise AssertionError("a validation error is a problem") from err

    def report(loc: tuple[str, ...], message: str, fix: str) -> None:
        problems.at(path, text, loc, message, fix)

    test = _check_test(parsed.test, report)
    _check_lb(parsed.lb, report)
    if health_path is not None and health:
        _check_health(health, test, path.name, health_path, problems)
    trace = parsed.traffic.trace
    if trace is not None and not (here / trace).is_file():
        report(
            ("traffic", "trace"),
            f"no such file {here / trace}",
            "give a trace file (hairline trace import), or remove it for the sample trace",
        )
    problems.raise_if_any(path, _HINT)
    assert health_path is not None
    return KrakenTest(
        path=path.resolve(),
        test=test,
        lb=parsed.lb.model_copy(
            update={
                name: str(here / value) if (value := getattr(parsed.lb, name)) else None
                for name in _LB_PATHS
            }
        ),
        traffic=parsed.traffic.model_copy(
            update={"trace": str(here / trace) if trace is not None else None}
        ),
        health_path=health_path.resolve(),
        health=health,
    )


def _check_health(
    health: tuple[HealthMetric, ...], test: TestTable, name: str, path: Path, problems: Problems
) -> None:
    """The health metrics' rules that depend on the test: servers named, windows long
    enough to hold a sample, keys that come to one value over the servers they read and name
    no other server in an `instance` matcher."""
    text = path.read_text()
    for metric in health:
        # The servers whose series the key reads; a server test leaves the cluster's metrics
        # out (docs/kraken.md, "What a run does"), and the engine's have no key to read.
        read = (
            (metric.server,)
            if metric.server is not None
            else test.servers
            if metric.entity == "cluster" and test.kind == "cluster"
            else ()
        )
        if metric.query is not None and read:
            problem = several_values(metric.query, len(read))
            if problem is not None:
                problems.at(path, text, ("metric", metric.name, "key"), *problem)
            for name in unknown_instances(metric.query, read):
                problems.at(path, text, ("metric", metric.name, "key"),
                            f'instance="{name}" is not a server it reads: no data, ever',
                            f"name one of {', '.join(read)} (its entity's servers)")  # fmt: skip
        if metric.server is not None and metric.server not in test.servers:
            problems.at(
                path,
                text,
                ("metric", metric.name, "entity"),
                f"{metric.server!r} is not a server under test",
                f"use one of {', '.join(dict.fromkeys(test.servers))} ([test] servers of {name})",
            )
        if metric.time_window_s < test.sample_interval_s:
            problems.at(
                path,
                text,
                ("metric", metric.name, "time_window"),
                f"{metric.time_window_s:g} s is shorter than one sample "
                f"({test.sample_interval_s:g} s, [test] sample_interval_s of {name}): "
                "its window would hold no samples",
                f"make it at least {test.sample_interval_s:g} s",
            )


def check_servers(path: Path, servers: Sequence[str], present: Collection[str], lb: str) -> None:
    """``[test] servers`` against the servers the load balancer ``lb`` has (read before the
    run starts, so that a name it lacks is a file mistake with its line and fix, not an
    abort mid-run); a :class:`ConfigError` if one is missing."""
    missing = [s for s in servers if s not in present]
    if not missing:
        return
    problems = Problems()
    text = path.read_text()
    names = sorted(present)
    for server in missing:
        close = difflib.get_close_matches(server, names, n=1)
        guess = f"did you mean {close[0]!r}? " if close else ""
        problems.at(path, text, ("test", "servers"), f"{server!r} is not a server of {lb}",
                    f"{guess}its servers are {', '.join(names)}")  # fmt: skip
    problems.raise_if_any(path, "name the backend's servers in [test] servers")


#: ``[lb]``'s paths, by the kind of load balancer they belong to.
_LB_PATHS = {"socket": "haproxy", "config": "nginx", "upstream_file": "nginx"}


def _check_lb(lb: LbTable, report: Report) -> None:
    """``[lb]``'s fields belong to its kind: a socket to HAProxy, the files to nginx."""
    for name, kind in _LB_PATHS.items():
        if kind != lb.kind and getattr(lb, name) is not None:
            wanted = [n for n, k in _LB_PATHS.items() if k == lb.kind]
            report(
                ("lb", name),
                f"{name} is {kind}'s, and this load balancer is kind = {lb.kind!r}",
                f'remove it ({lb.kind} takes {" and ".join(wanted)}), or write kind = "{kind}"',
            )


def _check_test(test: TestTable, report: Report) -> TestTable:
    """``[test]``'s rules across fields; ``steps`` completed with the defaults."""
    for server in test.servers:
        if not _SERVER_NAME.match(server):
            report(
                ("test", "servers"),
                f"{server!r} is not a server name",
                "use the backend's server names as HAProxy shows them",
            )
    doubled = sorted({s for s in test.servers if test.servers.count(s) > 1})
    if doubled:
        report(("test", "servers"), f"{', '.join(doubled)} named twice", "name each server once")
    names = [level.name for level in _STEP_LEVELS]
    for name, step in test.steps.items():
        if name not in names:
            report(
                ("test", "steps", name),
                f"no step for level {name!r}",
                f"steps are for {', '.join(names)} (NOMORE holds, BACKOFF steps back)",
            )
        elif not 0 < step <= 1:
            report(
                ("test", "steps", name),
                f"{step} is not a share of traffic in (0, 1]",
                "write 0.15 for 15 points of all traffic",
            )
    if test.control_interval_s < test.sample_interval_s:
        report(
            ("test", "control_interval_s"),
            f"{test.control_interval_s:g} s is shorter than sample_interval_s "
            f"({test.sample_interval_s:g} s)",
            "decide at most once per sample: raise control_interval_s",
        )
    return test.model_copy(update={"steps": {**_default_steps(), **test.steps}})


def _known_fields(table: tuple[str, ...]) -> list[str]:
    tables: dict[tuple[str, ...], type[TomlModel]] = {
        ("test",): TestTable,
        ("lb",): LbTable,
        ("traffic",): TrafficTable,
    }
    return list(tables.get(table, KrakenFile).model_fields)
