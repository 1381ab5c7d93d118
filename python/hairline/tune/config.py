"""A tuning file (docs/tuning.md): the experiment every evaluation runs, the parameters
searched, how a configuration reaches the service, the objective, the searcher, the budget
and the constraints. Read once, every problem reported together by file, line and field.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import meta

from hairline.config import ExperimentConfig
from hairline.config.policy import BUILTIN_DIRECTIONS
from hairline.config.sections import TomlModel
from hairline.config.tomlcheck import Problems, read_model
from hairline.lab.files import load_named_experiment
from hairline.tune.searchers import SEARCHERS, check_options
from hairline.tune.space import (
    BoolParam,
    ChoiceParam,
    Configuration,
    FloatParam,
    IntParam,
    Param,
    Space,
    Value,
)
from hairline.tune.tables import (
    ApplyTable,
    ClustersTable,
    FileTable,
    LimitTable,
    ObjectiveTable,
    ParamTable,
    SearchTable,
    TuningFile,
)

__all__ = [
    "CONFIG_FILE_PLACEHOLDER",
    "ApplyTable",
    "ClustersTable",
    "LimitTable",
    "TuningFile",
    "TuningSpec",
    "load_tuning_file",
]

# In [apply] args and env: the path of the configuration file rendered for the candidate.
CONFIG_FILE_PLACEHOLDER = "config_file"
_HINT = "fix each line above; `hairline tune --check FILE` checks without running"
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class TuningSpec:
    """A tuning file as read: everything a run needs, the experiment file resolved."""

    path: Path
    name: str
    experiment: ExperimentConfig
    space: Space
    metric: str
    higher_is_better: bool
    searcher: str
    evaluations: int
    batch_size: int
    seed: int
    shared_control: bool
    options: dict[str, Any]
    # Experiments the candidate's own arm must fail before it is infeasible (outcome.py).
    infeasible_after_failures: int
    apply: ApplyTable
    template: str | None
    constraints: dict[str, LimitTable]
    clusters: ClustersTable | None

    @property
    def default(self) -> Configuration:
        return self.space.default


def _param(name: str, table: ParamTable, report: Any) -> Param | None:
    """One parameter, or None after reporting what is wrong with it."""
    loc = ("params", name)
    if not _NAME.match(name):
        report(loc, f"{name!r} is not a parameter name", "use letters, digits and '_'")
        return None
    if table.type == "bool":
        if not isinstance(table.default, bool):
            report(
                (*loc, "default"),
                f"{table.default!r} is not true or false",
                "write default = true or default = false",
            )
            return None
        return BoolParam(name)
    if table.type == "choice":
        choices = table.choices or []
        if len(choices) < 2:
            report(
                (*loc, "choices"),
                "a choice needs at least two choices",
                'write choices = ["a", "b"]',
            )
            return None
        if len(set(map(repr, choices))) != len(choices):
            report((*loc, "choices"), "a choice is named twice", "name each choice once")
            return None
        # 1 == True in Python: a choice matches the default only with the same type.
        if not any(type(c) is type(table.default) and c == table.default for c in choices):
            report(
                (*loc, "default"),
                f"{table.default!r} is not one of the choices",
                f"use one of {', '.join(map(repr, choices))}",
            )
            return None
        return ChoiceParam(name, tuple(choices))
    return _ranged(name, table, report)


def _levels(name: str, table: ParamTable, report: Any) -> IntParam | None:
    loc = ("params", name)
    levels = table.values or []
    if table.type != "int":
        report((*loc, "values"), "values are for int parameters",
               'use type = "int", or choices = [...] for a choice')  # fmt: skip
        return None
    if table.low is not None or table.high is not None:
        report((*loc, "values"), "values and low/high both given",
               "give either values = [...] or low and high")  # fmt: skip
        return None
    if len(levels) < 2 or levels != sorted(set(levels)):
        report((*loc, "values"), f"{levels} is not two or more ascending whole numbers",
               "write e.g. values = [16, 32, 64, 128]")  # fmt: skip
        return None
    if table.log and levels[0] <= 0:
        report((*loc, "values"), "a log-scaled parameter's values must be above 0",
               "drop the values at or below 0 (or log = true)")  # fmt: skip
        return None
    if isinstance(table.default, bool) or table.default not in levels:
        report((*loc, "default"), f"{table.default!r} is not one of the values",
               f"use one of {', '.join(map(str, levels))}")  # fmt: skip
        return None
    return IntParam(name, levels[0], levels[-1], log=table.log, levels=tuple(levels))


def _ranged(name: str, table: ParamTable, report: Any) -> IntParam | FloatParam | None:
    loc = ("params", name)
    if table.values is not None:
        return _levels(name, table, report)
    missing = [f for f in ("low", "high") if getattr(table, f) is None]
    for field in missing:
        report((*loc, field), "missing", f"add {field} = ... (the range is inclusive)")
    if missing:
        return None
    low, high = float(table.low or 0), float(table.high or 0)
    whole = table.type == "int"
    if whole and not (low.is_integer() and high.is_integer()):
        report(
            (*loc, "low"),
            "an int parameter's range is whole numbers",
            'write whole numbers, or type = "float"',
        )
        return None
    if not (math.isfinite(low) and math.isfinite(high)) or low >= high:
        report(
            (*loc, "high"),
            f"the range {low:g}..{high:g} is empty or backwards",
            "make high larger than low",
        )
        return None
    if table.log and low <= 0:
        report(
            (*loc, "low"),
            f"a log-scaled range must start above 0, not at {low:g}",
            "raise low to 1 (or drop log = true)",
        )
        return None
    default = table.default
    if isinstance(default, bool) or not isinstance(default, int | float):
        report(
            (*loc, "default"),
            f"{default!r} is not a number",
            f"write a number in {low:g}..{high:g}",
        )
        return None
    if whole and not float(default).is_integer():
        report((*loc, "default"), f"{default!r} is not a whole number", "write a whole number")
        return None
    if not low <= default <= high:
        report(
            (*loc, "default"),
            f"{default:g} is outside the range {low:g}..{high:g}",
            "move default into the range, or widen the range",
        )
        return None
    if whole:
        return IntParam(name, int(low), int(high), log=table.log)
    return FloatParam(name, low, high, log=table.log)


def _default_of(param: Param, table: ParamTable) -> Value:
    if isinstance(param, IntParam):
        return int(table.default)
    if isinstance(param, FloatParam):
        return float(table.default)
    return table.default


def _known_fields(table: tuple[str, ...]) -> list[str]:
    models: dict[tuple[str, ...], type[TomlModel]] = {
        (): TuningFile,
        ("objective",): ObjectiveTable,
        ("search",): SearchTable,
        ("apply",): ApplyTable,
        ("apply", "file"): FileTable,
        ("clusters",): ClustersTable,
    }
    if len(table) == 2 and table[0] == "params":
        return list(ParamTable.model_fields)
    if len(table) == 2 and table[0] == "constraints":
        return list(LimitTable.model_fields)
    return list(models.get(table, TuningFile).model_fields)


def load_tuning_file(path: Path) -> TuningSpec:
    """Read a tuning file and the experiment file it names; every problem at once."""
    problems = Problems()
    text, parsed = read_model(path, TuningFile, problems, _known_fields, _HINT)

    def report(loc: tuple[str, ...], message: str, fix: str) -> None:
        problems.at(path, text, loc, message, fix)

    here = path.parent
    experiment = load_named_experiment(here / parsed.experiment, report)
    params = {name: _param(name, table, report) for name, table in parsed.params.items()}
    space = Space(
        tuple(p for p in params.values() if p is not None),
        {n: _default_of(p, parsed.params[n]) for n, p in params.items() if p is not None},
    )
    template = _template(here, parsed.apply, report)
    _check_apply(parsed.apply, parsed.params, template, report)
    higher = _objective(parsed.objective, experiment, report)
    for metric in parsed.constraints:
        _known_metric(metric, experiment, ("constraints", metric), report)
    whole = len(space.params) == len(parsed.params)  # a bad parameter leaves the size unknown
    evaluations = _budget(parsed.search, space if whole else Space(()), report)
    _check_searcher(parsed.search, space, report)
    if parsed.clusters is not None and parsed.search.shared_control:
        report(
            ("search", "shared_control"),
            "test and control clusters pin one candidate "
            "to each test host, so a shared control arm has no host",
            "drop shared_control, or the [clusters] table",
        )
    problems.raise_if_any(path, _HINT)
    assert experiment is not None and higher is not None
    return TuningSpec(
        path=path.resolve(),
        name=parsed.name or path.stem,
        experiment=experiment,
        space=space,
        metric=parsed.objective.metric,
        higher_is_better=higher,
        searcher=parsed.search.searcher,
        evaluations=evaluations,
        batch_size=parsed.search.batch_size,
        seed=parsed.search.seed,
        shared_control=parsed.search.shared_control,
        options=dict(parsed.search.options),
        infeasible_after_failures=parsed.search.infeasible_after_failures,
        apply=parsed.apply,
        template=template,
        constraints=dict(parsed.constraints),
        clusters=parsed.clusters,
    )


def _template(here: Path, apply: ApplyTable, report: Any) -> str | None:
    if apply.file is None:
        return None
    path = here / apply.file.template
    try:
        source = path.read_text()
    except OSError as err:
        report(
            ("apply", "file", "template"),
            f"cannot read {path}: {err.strerror or err}",
            "name a template file beside the tuning file",
        )
        return None
    try:
        jinja2.Environment().parse(source)
    except jinja2.TemplateSyntaxError as err:
        report(
            ("apply", "file", "template"),
            f"{path}:{err.lineno}: {err.message}",
            "fix the template's Jinja2 syntax ({{ name }} is a parameter's value)",
        )
        return None
    return source


def _check_apply(
    apply: ApplyTable, params: dict[str, ParamTable], template: str | None, report: Any
) -> None:
    """Every placeholder names a parameter, and every parameter reaches the service."""
    names = set(params)
    used: set[str] = set()
    words: list[tuple[tuple[str, ...], str]] = [(("apply", "args"), w) for w in apply.args]
    words += [(("apply", "env", k), v) for k, v in apply.env.items()]
    for loc, word in words:
        for found in _PLACEHOLDER.findall(word):
            if found == CONFIG_FILE_PLACEHOLDER:
                if apply.file is None:
                    report(
                        loc,
                        "{config_file} but no [apply.file] to render",
                        'add [apply.file] template = "...", or drop {config_file}',
                    )
            elif found not in names:
                report(
                    loc,
                    f"{{{found}}} is not a parameter",
                    f"use one of {', '.join('{' + n + '}' for n in sorted(names))}",
                )
            used.add(found)
    for name in apply.flags:
        if name not in names:
            report(
                ("apply", "flags", name),
                f"{name!r} is not a parameter",
                f"use one of {', '.join(sorted(names))}",
            )
        elif params[name].type != "bool":
            report(
                ("apply", "flags", name),
                f"{name} is not a bool parameter, so it is not a flag",
                f'pass it as a value: args = ["--{name}", "{{{name}}}"]',
            )
        used.add(name)
    if template is not None:
        used |= meta.find_undeclared_variables(jinja2.Environment().parse(template))
    for name in sorted(names - used):
        report(
            ("params", name),
            "the parameter reaches the service nowhere",
            f'use it in [apply]: args = ["--{name.replace("_", "-")}", "{{{name}}}"], '
            "flags, env or the template",
        )


def _known_metric(
    metric: str, experiment: ExperimentConfig | None, loc: tuple[str, ...], report: Any
) -> bool:
    if experiment is None:
        return False
    known = set(BUILTIN_DIRECTIONS) | set(experiment.policies())
    if metric not in known:
        report(
            loc,
            f"{metric!r} is not a metric of {experiment.service.name}",
            f"use one of {', '.join(sorted(known))}",
        )
        return False
    return True


def _objective(
    objective: ObjectiveTable, experiment: ExperimentConfig | None, report: Any
) -> bool | None:
    if not _known_metric(objective.metric, experiment, ("objective", "metric"), report):
        return None
    assert experiment is not None
    if objective.direction is not None:
        return objective.direction == "higher"
    policy = experiment.policies().get(objective.metric)
    direction = policy.direction if policy is not None else BUILTIN_DIRECTIONS[objective.metric]
    return direction == "lower-is-worse"


def _budget(search: SearchTable, space: Space, report: Any) -> int:
    size = space.size() if space.params else None
    if search.evaluations is not None:
        if size is not None and search.evaluations > size - 1:
            report(
                ("search", "evaluations"),
                f"{search.evaluations} evaluations, but the "
                f"space has only {size - 1} configurations besides the default",
                f"write evaluations = {size - 1} or fewer (or widen the space)",
            )
        return search.evaluations
    if search.searcher == "grid" and size is not None:
        return size - 1
    report(
        ("search", "evaluations"),
        "missing",
        "add evaluations = N (the number of A/B experiments; 15-30 for bo)",
    )
    return 0


def _check_searcher(search: SearchTable, space: Space, report: Any) -> None:
    if search.searcher not in SEARCHERS:
        report(
            ("search", "searcher"),
            f"{search.searcher!r} is not a searcher",
            f"use one of {', '.join(SEARCHERS)}",
        )
        return
    if search.searcher == "grid" and not space.is_finite():
        report(
            ("search", "searcher"),
            "grid needs a finite space, and a float parameter has no grid",
            'use "bo" or "random", or make the float an int or a choice',
        )
        return
    try:
        check_options(search.searcher, search.options)
    except ValueError as err:
        report(("search", "options"), str(err), "see docs/tuning.md for each searcher's options")
