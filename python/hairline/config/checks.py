"""The rules of an experiment file that its models cannot state alone: placeholders and
metrics of the service, arm sources, the arms' baselines, hardware and capacity mode. Each
problem is reported, not raised, so that one round finds them all.
"""

from __future__ import annotations

import difflib
import re
import string
from collections.abc import Callable
from pathlib import Path

from hairline.collect.registry import MAX_THROUGHPUT, OPTIONAL
from hairline.config.experiment import (
    NAME_PATTERN,
    START_PLACEHOLDERS,
    ExperimentConfig,
    ServiceConfig,
    parse_every_s,
)
from hairline.config.policy import (
    BUILTIN_DIRECTIONS,
    DIRECTIONS,
    FAMILY_POLICIES,
    metric_family,
    parse_threshold,
)
from hairline.config.sections import CAPACITY_FIELDS, HOST_CLASS_FACTS
from hairline.errors import ConfigError

__all__ = ["Report", "check_experiment", "check_service", "idle_settings"]

# How a check reports a problem: (field path, what is wrong, the fix).
Report = Callable[[tuple[str, ...], str, str], None]


def check_service(service: ServiceConfig, svc: Report) -> None:
    """The service's rules; ``svc`` gets each problem at its field path within the service."""
    fields = _template_fields(service.start)
    for name, word in fields:
        if name not in START_PLACEHOLDERS:
            svc(
                ("start",),
                f"unknown placeholder {{{name}}} in {word!r}",
                f"use only {', '.join('{' + p + '}' for p in START_PLACEHOLDERS)}; "
                "write {{ and }} for literal braces",
            )
    uses_artifact = any(n == "artifact" for n, _ in fields)
    if uses_artifact and service.build.command is None and service.build.artifact is None:
        svc(
            ("start",),
            "{artifact} is used but the service has no [service.build]",
            'add [service.build] with command = "..." and artifact = "path/it/produces"',
        )
    if service.build.command is not None and service.build.artifact is None:
        svc(("build", "artifact"), "a build command needs an artifact", 'add artifact = "..."')
    for key in ("health", "warm", "metrics_path"):
        value = getattr(service, key)
        if value is not None and not value.startswith("/"):
            svc((key,), f"{value!r} is not a path", f'write it as a path, e.g. "/{value}"')
    for name in service.collect:
        if name not in OPTIONAL:
            names = ", ".join(OPTIONAL) or "none yet"
            svc(("collect",), f"no optional collector {name!r}",
                f"use one of: {names} (docs/lab.md, Metrics)")  # fmt: skip
    known = [
        *BUILTIN_DIRECTIONS,
        *FAMILY_POLICIES,
        *(f"{c}_per_request" for c in service.counters),
    ]
    for metric, mc in service.metrics.items():
        # name[endpoint]_per_request is the per-endpoint form of a counter's metric, and
        # dropped_writes[ADDRESS METHOD /path] of the egress proxies' dropped writes.
        if metric_family(metric) not in known:
            close = difflib.get_close_matches(metric, known, n=1)
            svc(
                ("metrics", metric),
                f"no metric {metric!r} is measured",
                f"did you mean {close[0]!r}?" if close else
                f"use one of {', '.join(known)} (a counter's metric is <counter>_per_request "
                "for a counter listed in counters)",
            )  # fmt: skip
        try:
            parse_threshold(mc.threshold)
        except ConfigError as err:
            svc(("metrics", metric, "threshold"), err.message, err.hint or "")
        if mc.direction is not None and mc.direction.lower() not in DIRECTIONS:
            svc(
                ("metrics", metric, "direction"),
                f"{mc.direction!r} is not a direction",
                "use higher-is-worse (latency, CPU) or lower-is-worse (throughput)",
            )
    if service.aa.every is not None:
        try:
            parse_every_s(service.aa.every)
        except ConfigError as err:
            svc(("aa", "every"), err.message, err.hint or "")


def check_experiment(config: ExperimentConfig, path: Path, exp: Report) -> None:
    """The experiment file's rules (``path`` is the file, for the paths it names)."""
    here = path.parent
    _check_hardware_mode(config, exp)
    _check_capacity_mode(config, exp)
    _check_pins(config, exp)
    if config.design.host_pairs != 1 and (config.hosts.pin or config.mode_name == "hardware"):
        exp(("design", "host_pairs"),
            "several host pairs with named hosts or hardware mode: those choose each "
            "arm's hosts themselves", "drop host_pairs (one pair), or drop pin and hardware "
            "mode")  # fmt: skip
    if not (here / config.trace).is_file():
        exp(("trace",), f"{config.trace!r}: no such file", "give the path relative to this file")
    if len(config.arms) < 2:
        exp(("arms",), f"{len(config.arms)} arm(s); an experiment compares at least two",
            "add [arms.A] (baseline) and [arms.B] (candidate)")  # fmt: skip
    for name, arm in config.arms.items():
        if not re.match(NAME_PATTERN, name):
            exp(("arms", name), f"arm name {name!r}", "use letters, digits, '.', '_' or '-'")
        if arm.path is not None and arm.git is not None:
            exp(("arms", name), "both path and git are set", "give one source per arm")
        if arm.repo is not None and arm.git is None:
            exp(("arms", name, "repo"), "repo without git", 'add git = "REVISION" or drop repo')
        if arm.path is not None and not (here / arm.path).is_dir():
            exp(("arms", name, "path"), f"{arm.path!r}: no such folder",
                "give a folder relative to this file")  # fmt: skip
        if arm.git is not None and not (here / (arm.repo or ".")).is_dir():
            exp(("arms", name, "repo"), f"{arm.repo!r}: no such folder",
                "give the git repository's folder")  # fmt: skip
        has_source = arm.path is not None or arm.git is not None
        if config.service.build.command is not None and not has_source:
            exp(("arms", name), "the service has a build but this arm has no source",
                'add path = "FOLDER" or git = "REVISION"')  # fmt: skip
    if config.baseline is not None and config.baseline not in config.arms:
        exp(("baseline",), f"{config.baseline!r} is not an arm",
            f"use one of {', '.join(config.arms)}")  # fmt: skip
    else:
        _check_arm_baselines(config, exp)


def _check_arm_baselines(config: ExperimentConfig, exp: Report) -> None:
    """Every ``[arms.X] baseline`` names another arm, and following them from any arm
    leads to the experiment's baseline (no arm is compared with itself, no cycle)."""
    root = config.baseline_arm
    for name, arm in config.arms.items():
        if arm.baseline is None:
            continue
        others = [a for a in config.arms if a != name]
        if name == root:
            fix = "drop this line"
            if others:
                fix += f", or make another arm the baseline: baseline = {others[0]!r} at the top"
            message = f"{name!r} is the experiment's baseline, so it is compared with nothing"
            exp(("arms", name, "baseline"), message, fix)
        elif arm.baseline == name:
            exp(("arms", name, "baseline"), "an arm cannot be its own baseline",
                f"use one of {', '.join(others)}")  # fmt: skip
        elif arm.baseline not in config.arms:
            exp(("arms", name, "baseline"), f"{arm.baseline!r} is not an arm",
                f"use one of {', '.join(others)}")  # fmt: skip
    for name in config.arms:
        seen = [name]
        current = name
        while current != root:
            named = config.arms[current].baseline
            nxt = root if named is None else named
            if nxt not in config.arms or nxt == current:
                break  # reported above
            if nxt in seen:
                cycle = " -> ".join([*seen[seen.index(nxt) :], nxt])
                exp(("arms", name, "baseline"),
                    f"the baselines go round in a circle ({cycle}) and never reach "
                    f"the experiment's baseline {root!r}",
                    f"compare one of these arms with {root!r}")  # fmt: skip
                return
            seen.append(nxt)
            current = nxt


_SAME_BUILD = ("path", "git", "repo", "args", "env")


def _check_hardware_mode(config: ExperimentConfig, exp: Report) -> None:
    """Hardware mode: every arm names its host class, by the same facts, each a different
    class, all running one build; outside it no arm names a host class."""
    if config.design.mode != "hardware":
        for name, arm in config.arms.items():
            if arm.hosts is not None:
                exp(("arms", name, "hosts"), "a host class is only for hardware mode",
                    'set [design] mode = "hardware" to compare machines, or drop it')  # fmt: skip
        return
    base_name = config.baseline_arm
    base = config.arms.get(base_name)
    classes: dict[str, dict[str, str]] = {}
    for name, arm in config.arms.items():
        facts = arm.hosts.facts() if arm.hosts is not None else {}
        if not facts:
            exp(("arms", name, "hosts"), "hardware mode needs each arm's host class",
                f'add hosts = {{ cpu_model = "..." }} (or {", ".join(HOST_CLASS_FACTS[:-1])} '
                "or turbo) to say which machines this arm is")  # fmt: skip
            continue
        classes[name] = facts
        for field in _SAME_BUILD:
            if base is None or name == base_name or getattr(arm, field) == getattr(base, field):
                continue
            exp(("arms", name, field), "hardware mode runs one build on every arm",
                f"give {field} as in arms.{base_name}, or drop it")  # fmt: skip
    named = {name: sorted(facts) for name, facts in classes.items()}
    first = next(iter(named.items()), None)
    for name, keys in named.items():
        if first is not None and keys != first[1]:
            exp(("arms", name, "hosts"),
                f"names {', '.join(keys)}; arms.{first[0]}.hosts names {', '.join(first[1])}",
                "name the same facts in every arm: they are to be the only difference")  # fmt: skip
    seen: dict[tuple[tuple[str, str], ...], str] = {}
    for name, facts in classes.items():
        key = tuple(sorted(facts.items()))
        if key in seen:
            exp(("arms", name, "hosts"), f"the same host class as arms.{seen[key]}",
                "give each arm a different class: the arms are what is compared")  # fmt: skip
        seen.setdefault(key, name)


def _check_pins(config: ExperimentConfig, exp: Report) -> None:
    """``[hosts] pin``: every arm and only the arms, each on hosts of its own, with the
    pinned design (set by default when pin is given); the pinned design needs pin."""
    pin = config.hosts.pin
    if not pin:
        if config.design.name == "pinned":
            exp(("design", "name"), "the pinned design needs [hosts] pin",
                'name each arm\'s hosts, e.g. pin = { A = ["host-1"], B = ["host-2"] }, or '
                'use "fully-balanced"')  # fmt: skip
        return
    arms = ", ".join(config.arms)
    owner: dict[str, str] = {}
    for name, hosts in pin.items():
        if name not in config.arms:
            exp(("hosts", "pin", name), f"no arm {name!r}", f"pin only this file's arms: {arms}")
        if not hosts:
            exp(("hosts", "pin", name), "names no host", "give the arm at least one host name")
        for host in hosts:
            if owner.setdefault(host, name) != name:
                exp(("hosts", "pin", name),
                    f"host {host!r} is pinned to arms {owner[host]} and {name}",
                    "give each arm hosts of its own (disjoint clusters)")  # fmt: skip
    missing = [name for name in config.arms if name not in pin]
    if missing:
        exp(("hosts", "pin"), f"arms {', '.join(missing)} have no hosts",
            f"pin every arm ({arms}), or drop pin")  # fmt: skip
    if config.design.mode == "hardware":
        exp(("hosts", "pin"), "hardware mode chooses each arm's hosts by class",
            "drop pin, or drop hardware mode")  # fmt: skip
    elif config.design.name != "pinned":
        exp(("design", "name"), f"{config.design.name!r} swaps arms between hosts; [hosts] "
            "pin keeps each arm on its own", 'drop name (pin implies "pinned")')  # fmt: skip


def idle_settings(config: ExperimentConfig) -> list[tuple[tuple[str, ...], str, str]]:
    """Settings the file sets that this experiment never uses, as (field, what, fix): not
    errors (the experiment runs), but a reader of the file believes them.

    ``[design] decide_on`` acts in three places only: with ``trials = "auto"`` (the trials
    stop once these verdicts settle), in capacity mode (what a batch measures), and when
    the rate is calibrated (the calibration's metric). With a fixed number of trials at a
    fixed rate every metric is judged alike after the last trial."""
    design = config.design
    idle: list[tuple[tuple[str, ...], str, str]] = []
    calibrated = config.load.rate_per_s is None
    if ("decide_on" in design.model_fields_set and not design.sequential
            and config.mode_name != "capacity" and not calibrated):  # fmt: skip
        idle.append((
            ("design", "decide_on"),
            f"decide_on acts only with trials = \"auto\" (or a calibrated rate, or capacity "
            f"mode); here {design.trials} trials run at a fixed rate and every metric is "
            "judged alike after the last, so an unsettled verdict stays inconclusive",
            'set trials = "auto" (with max_trials) to run until these verdicts settle, or '
            "drop decide_on",
        ))  # fmt: skip
    return idle


# What a capacity batch measures (lab/capacity.py): what decide_on may name in that mode.
CAPACITY_METRICS = (MAX_THROUGHPUT.name,)


def _check_capacity_mode(config: ExperimentConfig, exp: Report) -> None:
    """``[mode]``: agrees with ``[design] mode``; capacity's settings only in capacity
    mode, where the SLO is required and decide_on names what a capacity batch measures."""
    mode = config.mode
    if "name" in mode.model_fields_set and (mode.name == "hardware") != (
        config.design.mode == "hardware"
    ):
        exp(("design", "mode"),
            f'{config.design.mode!r} contradicts [mode] name = "{mode.name}"',
            "drop [design] mode: [mode] name says what the experiment measures")  # fmt: skip
    if mode.name != "capacity":
        for field in CAPACITY_FIELDS:
            if field in mode.model_fields_set:
                exp(("mode", field), f"{field} is a setting of capacity mode",
                    'set [mode] name = "capacity", or drop it')  # fmt: skip
        return
    if mode.slo_p99_ms is None:
        exp(("mode", "slo_p99_ms"), "capacity mode needs the SLO's p99 latency",
            "add slo_p99_ms = 50 (milliseconds) to [mode]: the highest rate whose p99 "
            "stays under it is the arm's capacity")  # fmt: skip
    start, most = mode.start_rate_per_s, mode.max_rate_per_s
    if start is not None and most is not None and start > most:
        exp(("mode", "start_rate_per_s"), f"{start:g} is above max_rate_per_s ({most:g})",
            "start the search below max_rate_per_s")  # fmt: skip
    if mode.probe_s > config.load.duration_s:
        exp(("mode", "probe_s"),
            f"{mode.probe_s:g} s is longer than [load] duration_s ({config.load.duration_s:g} s)",
            "short probes find the knee and the full duration confirms it: make probe_s "
            "shorter than duration_s (1 s against 10 s, say)")  # fmt: skip
    _check_pid_search(config, exp)
    for metric in config.design.decide_on:
        if metric not in CAPACITY_METRICS:
            exp(("design", "decide_on"), f"{metric!r} is not measured in capacity mode",
                f"use {', '.join(CAPACITY_METRICS)}, or drop decide_on")  # fmt: skip


def _check_pid_search(config: ExperimentConfig, exp: Report) -> None:
    """``search = "pid"``'s target: the p99 against the SLO, or the mean against
    ``target_latency_ms``; the probe search's own settings are not the PID's."""
    mode = config.mode
    if mode.search != "pid":
        for field in ("target", "target_latency_ms"):
            if field in mode.model_fields_set:
                exp(("mode", field), f"{field} is a setting of the PID search",
                    'set [mode] search = "pid", or drop it')  # fmt: skip
        return
    if "probe_s" in mode.model_fields_set:
        exp(("mode", "probe_s"), "the PID search runs no probes",
            'drop probe_s, or use search = "probe"')  # fmt: skip
    if mode.target == "mean" and mode.target_latency_ms is None:
        exp(("mode", "target_latency_ms"), 'target = "mean" needs the mean latency to meet',
            "add target_latency_ms = 5 (milliseconds) to [mode]")  # fmt: skip
    if mode.target == "p99" and mode.target_latency_ms is not None:
        exp(("mode", "target_latency_ms"), 'with target = "p99" the target is slo_p99_ms',
            'drop target_latency_ms, or set target = "mean"')  # fmt: skip
    mean_ms, slo_ms = mode.target_latency_ms, mode.slo_p99_ms
    if mode.target == "mean" and mean_ms and slo_ms and mean_ms >= slo_ms:
        exp(("mode", "target_latency_ms"),
            f"{mean_ms:g} ms is not below slo_p99_ms ({slo_ms:g} ms)",
            "a mean at or above the p99's limit breaks the SLO at the rate it finds: "
            "lower target_latency_ms")  # fmt: skip


def _template_fields(template: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for word in template.split():
        try:
            parsed = list(string.Formatter().parse(word))
        except ValueError:
            out.append(("unbalanced braces", word))
            continue
        out.extend((name, word) for _, name, _, _ in parsed if name is not None)
    return out
