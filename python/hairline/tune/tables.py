"""A tuning file's tables as written (docs/tuning.md, "The tuning file"): what
``tune/config.py`` validates, every problem reported together, and what
docs/schema/tune.json is generated from.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from hairline.config.sections import TomlModel

__all__ = [
    "ApplyTable",
    "ClustersTable",
    "FileTable",
    "LimitTable",
    "ObjectiveTable",
    "ParamTable",
    "SearchTable",
    "TuningFile",
]


class ParamTable(TomlModel):
    """``[params.NAME]``: ``type`` int, float, bool or choice; ``low``/``high`` (int and
    float, inclusive), ``log`` (searched on a log scale), ``choices``, and ``default``: the
    production configuration's value, the control of every A/B."""

    type: Literal["int", "float", "bool", "choice"]
    """The parameter's kind."""
    low: float | None = None
    """int and float: the lowest value tried (inclusive)."""
    high: float | None = None
    """int and float: the highest value tried (inclusive)."""
    log: bool = False
    """Searched on a log scale."""
    choices: list[str | int | float | bool] | None = None
    """choice: the values tried."""
    values: list[int] | None = None
    """int only: the values worth trying, ascending (e.g. powers of 2), instead of
    low..high."""
    default: str | int | float | bool
    """The production configuration's value: the control of every A/B."""


class FileTable(TomlModel):
    """``[apply.file]``: a Jinja2 template rendered per candidate (``{{ name }}`` is a
    parameter's value) into a file of this name; ``{config_file}`` in args or env is its path."""

    template: str = Field(min_length=1)
    """The Jinja2 template, relative to the tuning file."""
    name: str = Field(default="tuned.conf", min_length=1)
    """The rendered file's name."""


class ApplyTable(TomlModel):
    """``[apply]``: how a configuration reaches the service: words appended to the start
    command (``{name}`` is a parameter's value), flags present when a boolean parameter is
    true, environment variables, and a rendered configuration file."""

    args: list[str] = Field(default_factory=list)
    """Words appended to the start command; ``{name}`` is a parameter's value."""
    flags: dict[str, str] = Field(default_factory=dict)
    """Per boolean parameter, the flag appended when it is true."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables; ``{name}`` is a parameter's value, ``{config_file}`` the
    rendered file's path."""
    file: FileTable | None = None
    """``[apply.file]``: a template rendered per candidate."""


class ObjectiveTable(TomlModel):
    """``[objective]``: the metric of the A/B whose relative effect is maximised in its
    better direction (the metric's own unless ``direction`` says "higher" or "lower" is
    better)."""

    metric: str = Field(min_length=1)
    """Any metric of the A/B."""
    direction: Literal["higher", "lower"] | None = None
    """Which way is better (default: the metric's own)."""


class SearchTable(TomlModel):
    """``[search]``: the searcher, the budget and how candidates are batched."""

    searcher: str = "bo"
    """bo, hill, single, random, tpe or grid (docs/tuning.md, "Searchers")."""
    evaluations: int | None = Field(default=None, ge=1, le=1000)
    """A/B experiments to run (grid: every configuration)."""
    batch_size: int = Field(default=1, ge=1, le=64)
    """Candidates proposed and run together."""
    seed: int = Field(default=0, ge=0)
    """The searcher's seed."""
    shared_control: bool = False
    """true: one experiment per batch, with one control arm."""
    options: dict[str, Any] = Field(default_factory=dict)
    """The searcher's own options, e.g. { initial = 5 }."""
    infeasible_after_failures: int = Field(default=2, ge=1, le=10)
    """Experiments in which the candidate's own arm fails (to start, to answer, to carry
    the load) while the default's does not, before the candidate is infeasible and never
    proposed again; after fewer, it is run again."""


class LimitTable(TomlModel):
    """A constraint on the candidate's mean of a metric (in the metric's unit)."""

    max: float | None = None
    """The candidate's mean may be at most this."""
    min: float | None = None
    """The candidate's mean may be at least this."""


class ClustersTable(TomlModel):
    """``[clusters]``: test and control clusters of ``size`` hosts each (Ray backend),
    cleared by an A/A between them before tuning starts (HHVM section 5.1)."""

    size: int = Field(ge=1, le=1000)
    """Hosts in each cluster."""


class TuningFile(TomlModel):
    """A tuning file as written (docs/tuning.md, "The tuning file")."""

    experiment: str = Field(min_length=1)
    """The A/B experiment file every evaluation runs, relative to this file."""
    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]+$")
    """The run's name (default: the file's name)."""
    objective: ObjectiveTable
    """``[objective]``: the metric whose effect is maximised."""
    search: SearchTable = Field(default_factory=SearchTable)
    """``[search]``: the searcher and the budget."""
    apply: ApplyTable = Field(default_factory=ApplyTable)
    """``[apply]``: how a configuration reaches the service."""
    params: dict[str, ParamTable] = Field(min_length=1)
    """``[params.NAME]``: the parameters searched."""
    constraints: dict[str, LimitTable] = Field(default_factory=dict)
    """Per metric, limits on the candidate's mean, in the metric's unit."""
    clusters: ClustersTable | None = None
    """``[clusters]``: test and control clusters (Ray backend)."""
