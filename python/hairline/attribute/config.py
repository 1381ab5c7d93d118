"""An attribution file (docs/attribution.md): the experiment whose service is varied, the
factors and how each level reaches the service or the load, the factorial design and the
analysis. Read once, every problem reported together by file, line and field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import jinja2
from jinja2 import meta
from pydantic import Field, ValidationError

from hairline.attribute.design import (
    Generator,
    Treatment,
    aliases,
    fractional_factorial,
    full_factorial,
    parse_generator,
)
from hairline.config import ArmConfig, ExperimentConfig
from hairline.config.sections import LoadConfig, TomlModel
from hairline.config.tomlcheck import Problems, Report, read_model
from hairline.kit.atomic import write_text_atomic
from hairline.lab.files import load_named_experiment

__all__ = ["AttributionFile", "AttributionSpec", "Factor", "load_attribution_file"]

_HINT = "fix each line above; `hairline attribute --check FILE` checks without running"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
# Replaced by the run's number when a run's arm is made: a per-run seed (e.g. the sample
# service's --stall-seed), so runs of one treatment differ and a rerun repeats them.
RUN_PLACEHOLDER = "{run}"
# [load] fields a factor may set: one replay drives every arm of an experiment, so these
# split the runs into experiments of their own.
LOAD_FIELDS = ("rate_per_s", "arrival", "duration_s")

Level = str | int | float | bool


class FactorTable(TomlModel):
    """``[factors.NAME]``: two or more ``levels`` (the first is the reference) and how a
    level reaches the service (``args``: words appended to its start command, ``{value}``
    the level, or a table of words per level; ``env``: variables, ``{value}`` the level) or
    the load (``load``: a [load] field the level sets). ``{run}`` in words or variables is
    the run's number (1, 2, ...), a per-run seed the same on every rerun of the file."""

    levels: list[Level] = Field(min_length=1)
    """Two or more levels; the first is the reference."""
    args: list[str] | dict[str, list[str]] | None = None
    """Words appended to the start command (``{value}`` the level, ``{run}`` the run's
    number), or a table of words per level (a level not named adds none)."""
    env: dict[str, str] | None = None
    """Environment variables; ``{value}`` is the level, ``{run}`` the run's number."""
    load: Literal["rate_per_s", "arrival", "duration_s"] | None = None
    """A load factor: the [load] field the level sets, instead of the service."""


class DesignTable(TomlModel):
    """``[design]``: ``full`` (every combination) or ``fractional`` (two-level factors, some
    generated from the others' products); repetitions of each treatment; the seed of the
    run order; how many runs one experiment measures side by side (the hosts it takes)."""

    type: Literal["full", "fractional"] = "full"
    """Every combination, or a fraction of them with ``generators``."""
    generators: list[str] = Field(default_factory=list)
    """Fractional designs: each generated factor as the product of others, e.g. "cache =
    cpu*stall*threads"."""
    repetitions: int = Field(default=3, ge=2, le=100)
    """Runs per treatment (2 or more: intervals resample runs)."""
    seed: int = Field(default=0, ge=0)
    """The seed of the run order."""
    runs_per_experiment: int = Field(default=2, ge=2, le=64)
    """Runs measured side by side (the hosts one experiment takes)."""


class AnalysisTable(TomlModel):
    """``[analysis]``: the quantiles regressed, the highest interaction order, the clustered
    bootstrap's resamples and confidence, and the quantile whose best treatment is shown."""

    quantiles: list[float] = Field(default_factory=lambda: [0.5, 0.9, 0.99, 0.999], min_length=1)
    """The latency quantiles regressed."""
    interactions: int = Field(default=2, ge=1, le=8)
    """The highest order of interaction terms (1: main effects only)."""
    bootstrap: int = Field(default=200, ge=20, le=10_000)
    """Resamples of runs for the intervals."""
    confidence: float = Field(default=0.95, gt=0.5, lt=1)
    """The intervals' confidence."""
    best_for: float = Field(default=0.99, gt=0, lt=1)
    """The quantile whose best treatment is reported."""


class TemplateTable(TomlModel):
    """``[template]``: a Jinja2 file rendered per treatment (``{{ factor }}`` is that
    factor's level) and the words that pass the rendered file's path (``{config_file}``)
    to the service, appended to every run's start command."""

    file: str = Field(min_length=1)
    """The Jinja2 template, relative to this file; ``{{ factor }}`` is a factor's level."""
    name: str = Field(default="attribute.conf", min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    """The rendered file's name (one folder per treatment)."""
    args: list[str] = Field(min_length=1)
    """Words that pass the rendered file's path (``{config_file}``) to the service."""


class AttributionFile(TomlModel):
    """An attribution file as written (docs/attribution.md, "The file")."""

    experiment: str = Field(min_length=1)
    """The experiment file whose first arm the factors vary (the service, the trace, the
    load), relative to this file."""
    template: TemplateTable | None = None
    """``[template]``: a configuration file rendered per treatment."""
    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]+$")
    """The run's name (default: the file's name)."""
    factors: dict[str, FactorTable] = Field(min_length=1)
    """``[factors.NAME]``: what is varied."""
    design: DesignTable = Field(default_factory=DesignTable)
    """``[design]``: the factorial design."""
    analysis: AnalysisTable = Field(default_factory=AnalysisTable)
    """``[analysis]``: the quantile regression and its bootstrap."""


@dataclass(frozen=True)
class Factor:
    """A factor as read: its levels as text (the first is the reference), the words and
    variables of each level, or the [load] field it sets."""

    name: str
    levels: tuple[str, ...]
    args: dict[str, tuple[str, ...]]
    env: dict[str, dict[str, str]]
    load: str | None


@dataclass(frozen=True)
class AttributionSpec:
    """An attribution file as read, its design expanded into treatments."""

    path: Path
    name: str
    experiment: ExperimentConfig
    factors: tuple[Factor, ...]
    treatments: tuple[Treatment, ...]
    generators: tuple[Generator, ...]
    design: DesignTable
    analysis: AnalysisTable
    template: TemplateTable | None = None
    template_text: str | None = None

    @property
    def levels(self) -> dict[str, tuple[str, ...]]:
        return {f.name: f.levels for f in self.factors}

    @property
    def load_factors(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.factors if f.load is not None)

    def arm(self, treatment: Treatment, folder: Path | None = None, run: int = 1) -> ArmConfig:
        """The experiment's baseline arm running ``treatment`` as run number ``run``: its
        own args and env, then each service factor's words and variables for its level
        (``{run}`` replaced by the number), then (with a [template]) the words passing the
        file rendered for the treatment into ``folder``."""
        base = self.experiment.arms[self.experiment.baseline_arm]
        args, env = list(base.args), dict(base.env)
        number = str(run)
        for factor in self.factors:
            level = treatment[factor.name]
            args += (w.replace(RUN_PLACEHOLDER, number) for w in factor.args.get(level, ()))
            env |= {
                k: v.replace(RUN_PLACEHOLDER, number) for k, v in factor.env.get(level, {}).items()
            }
        if self.template is not None and self.template_text is not None:
            if folder is None:
                raise ValueError("a treatment with a [template] needs a folder to render into")
            rendered = _render(self.template_text, treatment, folder / self.template.name)
            args += [w.replace("{config_file}", str(rendered)) for w in self.template.args]
        return base.model_copy(update={"args": args, "env": env, "baseline": None})

    def load(self, treatment: Treatment) -> LoadConfig:
        """The experiment's [load] with the load factors' levels of ``treatment``."""
        changes: dict[str, Any] = {}
        for factor in self.factors:
            if factor.load is not None:
                level = treatment[factor.name]
                changes[factor.load] = level if factor.load == "arrival" else float(level)
        return self.experiment.load.model_copy(update=changes)


def _render(template: str, treatment: Treatment, path: Path) -> Path:
    """The template rendered with the treatment's levels, written whole (a temporary name,
    then renamed)."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    text = env.from_string(template).render(**treatment)
    return write_text_atomic(path, text)


def level_text(level: Level) -> str:
    """A level as the service reads it: true/false, whole numbers without a point."""
    if isinstance(level, bool):
        return "true" if level else "false"
    if isinstance(level, float) and level.is_integer():
        return str(int(level))
    return str(level)


def _factor(name: str, table: FactorTable, in_template: bool, report: Report) -> Factor | None:
    loc = ("factors", name)
    if not _NAME.match(name):
        report(loc, f"{name!r} is not a factor name", "use letters, digits and '_'")
        return None
    levels = tuple(level_text(v) for v in table.levels)
    if len(levels) < 2:
        report((*loc, "levels"), "a factor needs two or more levels",
               "add a level, or drop the factor (it cannot explain anything)")  # fmt: skip
        return None
    if len(set(levels)) != len(levels):
        report((*loc, "levels"), "a level is named twice", "name each level once")
        return None
    reaches = [k for k in ("args", "env", "load") if getattr(table, k) is not None]
    if not reaches and not in_template:
        report(loc, "the factor reaches neither the service nor the load",
               'add args = ["--flag", "{value}"], env = {VAR = "{value}"}, load = '
               '"rate_per_s", or use {{ ' + name + ' }} in the [template]')  # fmt: skip
        return None
    if table.load is not None and len(reaches) > 1:
        report((*loc, "load"), "a load factor sets the [load] table only",
               "drop its args and env, or make it two factors")  # fmt: skip
        return None
    if table.load is not None:
        return Factor(name, levels, {}, {}, _load_levels(name, table, levels, report))
    args = _level_args(name, table, levels, report)
    env = {
        level: {k: v.replace("{value}", level) for k, v in (table.env or {}).items()}
        for level in levels
    }
    for key, value in (table.env or {}).items():
        _only_value(value, (*loc, "env", key), report)
    return Factor(name, levels, args, env, None)


def _load_levels(name: str, table: FactorTable, levels: tuple[str, ...], report: Report) -> str:
    field = table.load or ""
    for level in levels:
        try:
            LoadConfig.model_validate({"duration_s": 1, field: level})
        except ValidationError:
            report(("factors", name, "levels"), f"{level!r} is not a valid {field}",
                   "arrival is constant or poisson; rate_per_s and duration_s are numbers "
                   "above 0")  # fmt: skip
    return field


def _level_args(
    name: str, table: FactorTable, levels: tuple[str, ...], report: Report
) -> dict[str, tuple[str, ...]]:
    loc = ("factors", name, "args")
    if table.args is None:
        return {}
    if isinstance(table.args, list):
        for word in table.args:
            _only_value(word, loc, report)
        return {lv: tuple(w.replace("{value}", lv) for w in table.args) for lv in levels}
    unknown = [lv for lv in table.args if lv not in levels]
    if unknown:
        report(loc, f"{', '.join(map(repr, unknown))} not among the levels",
               f"use the levels {', '.join(levels)} (a level absent here adds no "
               "words)")  # fmt: skip
    for level, words in table.args.items():
        for word in words:
            _only_value(word, (*loc, level), report)
    return {lv: tuple(table.args.get(lv, [])) for lv in levels}


def _only_value(word: str, loc: tuple[str, ...], report: Report) -> None:
    for found in _PLACEHOLDER.findall(word):
        if found not in ("value", "run"):
            report(loc, f"{{{found}}} is not a placeholder here",
                   "{value} is the factor's level, {run} the run's number; other factors "
                   "have their own args")  # fmt: skip


def _known_fields(table: tuple[str, ...]) -> list[str]:
    if len(table) == 2 and table[0] == "factors":
        return list(FactorTable.model_fields)
    models: dict[tuple[str, ...], type[TomlModel]] = {
        ("template",): TemplateTable,
        ("design",): DesignTable,
        ("analysis",): AnalysisTable,
    }
    return list(models.get(table, AttributionFile).model_fields)


def load_attribution_file(path: Path) -> AttributionSpec:
    """Read an attribution file and the experiment file it names; every problem at once."""
    problems = Problems()
    text, parsed = read_model(path, AttributionFile, problems, _known_fields, _HINT)

    def report(loc: tuple[str, ...], message: str, fix: str) -> None:
        problems.at(path, text, loc, message, fix)

    experiment = load_named_experiment(path.parent / parsed.experiment, report)
    template_text, variables = _template(path.parent, parsed, report)
    factors = [_factor(n, t, n in variables, report) for n, t in parsed.factors.items()]
    known = tuple(f for f in factors if f is not None)
    generators = _generators(parsed.design, report)
    treatments: list[Treatment] = []
    if len(known) == len(factors):
        treatments = _treatments(known, generators, parsed, report)
    _check_analysis(parsed.analysis, report)
    problems.raise_if_any(path, _HINT)
    assert experiment is not None
    return AttributionSpec(
        path=path.resolve(),
        name=parsed.name or path.stem,
        experiment=experiment,
        factors=known,
        treatments=tuple(treatments),
        generators=tuple(generators),
        design=parsed.design,
        analysis=parsed.analysis,
        template=parsed.template,
        template_text=template_text,
    )


def _template(here: Path, parsed: AttributionFile, report: Report) -> tuple[str | None, set[str]]:
    """The template's text and the variables it uses, every mistake reported."""
    table = parsed.template
    if table is None:
        return None, set()
    path = here / table.file
    try:
        text = path.read_text()
        variables = meta.find_undeclared_variables(jinja2.Environment().parse(text))
    except OSError as err:
        report(("template", "file"), f"cannot read {path}: {err.strerror or err}",
               "name a Jinja2 file beside the attribution file")  # fmt: skip
        return None, set()
    except jinja2.TemplateSyntaxError as err:
        report(("template", "file"), f"{path}:{err.lineno}: {err.message}",
               "fix the template ({{ factor }} is a factor's level)")  # fmt: skip
        return None, set()
    unknown = sorted(variables - set(parsed.factors))
    if unknown:
        report(("template", "file"), f"{path} uses {', '.join(unknown)}, not factors",
               f"use the factors {', '.join(parsed.factors)}")  # fmt: skip
    if not any("{config_file}" in word for word in table.args):
        report(("template", "args"), "no word passes the rendered file",
               'write e.g. args = ["--config", "{config_file}"]')  # fmt: skip
    return text, set(variables)


def _generators(design: DesignTable, report: Report) -> list[Generator]:
    if design.type == "full":
        if design.generators:
            report(("design", "generators"), "generators belong to a fractional design",
                   'write type = "fractional", or drop the generators')  # fmt: skip
        return []
    if not design.generators:
        report(("design", "generators"), "a fractional design needs generators",
               'write e.g. generators = ["c = a*b"]')  # fmt: skip
    found = []
    for text in design.generators:
        try:
            found.append(parse_generator(text))
        except ValueError as err:
            report(("design", "generators"), str(err), 'write e.g. "c = a*b"')
    return found


def _treatments(
    factors: tuple[Factor, ...],
    generators: list[Generator],
    parsed: AttributionFile,
    report: Report,
) -> list[Treatment]:
    levels = {f.name: f.levels for f in factors}
    if parsed.design.type == "full":
        return full_factorial(levels)
    try:
        treatments = fractional_factorial(levels, generators)
    except ValueError as err:
        report(("design", "generators"), str(err), "see docs/attribution.md, fractional designs")
        return []
    order = parsed.analysis.interactions
    clash = aliases(generators, [f.name for f in factors], order)
    if clash:
        pairs = ", ".join(f"{a} with {b}" for a, b in clash[:4])
        report(("analysis", "interactions"),
               f"this fraction cannot tell apart {pairs}",
               f"lower interactions to {order - 1} (and read each effect as its aliases' "
               "sum), add runs with a full design, or choose generators of higher "
               "resolution")  # fmt: skip
    return treatments


def _check_analysis(analysis: AnalysisTable, report: Report) -> None:
    bad = [q for q in analysis.quantiles if not 0 < q < 1]
    if bad:
        report(("analysis", "quantiles"), f"{bad} outside (0, 1)",
               "write quantiles as fractions, e.g. [0.5, 0.99, 0.999]")  # fmt: skip
    if len(set(analysis.quantiles)) != len(analysis.quantiles):
        report(("analysis", "quantiles"), "a quantile is named twice", "name each once")
