"""An experiment file's ``[suggest]`` table, and the reason ``hairline run --suggested-by``
records in it: which functions the change modifies and which endpoints it replays.

::

    [suggest]
    repo = "."                       # the service's git repository (relative to this file)
    base = "main"                    # default: the head's parent
    head = "my-change"               # or `hairline run FILE --suggested-by REV`
    profiles = ["prod.folded"]       # folded stacks or pprof, merged
    endpoint_label = "endpoint"      # pprof's sample label naming the endpoint
    threshold = "0.1%"               # below it, nothing to test (run exits 0)
    count = 5000                     # requests in the re-mixed trace (default: as many as
                                     # the trace has of those endpoints)

The models import nothing of hairline (``config/experiment.py`` imports this module, so it
must not import ``hairline.config`` back); ``TomlModel``'s rules are repeated here.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

__all__ = ["SuggestConfig", "SuggestedEndpoint", "SuggestedFunction", "SuggestedMix", "why_notes"]


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class SuggestedFunction(_Table):
    name: str
    change: str  # "modified", "renamed", ... with the old name: "modified, was x.y"
    cost: float
    share: float  # of the whole profile
    # Its name in the base when the change renamed it: the baseline's profile knows that
    # one (the report marks both). Absent in what earlier versions stored.
    old_name: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """Every name a profile may know it by."""
        return (self.name, self.old_name) if self.old_name else (self.name,)


class SuggestedEndpoint(_Table):
    endpoint: str  # the trace's label
    share: float  # of the modified code's cost: the replay's weight
    requests: int  # in the re-mixed trace


class SuggestedMix(_Table):
    """What ``--suggested-by`` found; stored with the experiment, shown by its report."""

    base: str
    head: str
    cost: float
    share: float
    unit: str
    functions: list[SuggestedFunction]
    endpoints: list[SuggestedEndpoint]
    missing: list[str] = Field(default_factory=list)  # endpoints the trace does not hold
    trace: str  # the trace it was mixed from


class SuggestConfig(_Table):
    """``[suggest]``: replay only the endpoints a change reaches, in their shares of the
    modified code's cost (docs/suggest.md)."""

    repo: str = "."
    """The service's git repository, relative to the experiment file."""
    base: str | None = None
    """The revision the change is compared with (default: the head's parent)."""
    head: str | None = None
    """The change (or ``hairline run FILE --suggested-by REV``)."""
    profiles: list[str] = Field(default_factory=list)
    """Production profiles, folded stacks or pprof, merged."""
    endpoint_label: str = Field(default="endpoint", min_length=1)
    """pprof's sample label naming the endpoint."""
    threshold: str | None = None
    """Below this share of the profile's cost ("0.1%"), nothing to test (run exits 0)."""
    count: int | None = Field(default=None, ge=1)
    """Requests in the re-mixed trace (default: as many as the trace has of those
    endpoints)."""
    why: SkipJsonSchema[SuggestedMix | None] = None
    """Written by ``hairline run``, not by hand: the reason the trace holds these
    endpoints."""


def why_notes(why: SuggestedMix | None) -> tuple[str, ...]:
    """The report's words for why the trace replays these endpoints (pure)."""
    if why is None:
        return ()
    functions = ", ".join(
        f"{f.name} ({f.change}, {f.share:.2%} of production)" for f in why.functions
    )
    endpoints = ", ".join(
        f"{e.endpoint} {e.share:.1%} ({e.requests:,} requests)" for e in why.endpoints
    )
    notes = [
        f"why these endpoints: {why.head} (against {why.base}) modifies {functions}; "
        f"impact {why.share:.3%} of the profile's cost. The trace replays only the endpoints "
        f"that run that code, in the shares of its cost there: {endpoints}"
    ]
    if why.missing:
        notes.append(
            "WARNING: endpoints that run the modified code but are not in the trace were left "
            f"out: {', '.join(why.missing)}"
        )
    return tuple(notes)
