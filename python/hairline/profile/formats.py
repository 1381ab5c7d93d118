"""Profiles of production: stacks with the endpoint they served and what they cost.

Two formats:

- folded (collapsed) stacks, one a line, the root frame the endpoint: ``GET /search;
  app.handlers.search;app.index.Index.lookup 1234``. A frame may carry its file as
  py-spy writes it, ``lookup (app/index.py:12)``;
- pprof protobuf (gzipped or not), the endpoint a sample label (``endpoint`` unless told);
  the cost of a sample is its default value (the last sample type, or
  ``default_sample_type``), times the period when that value is a count of samples.

The pprof message classes are built at run time from a descriptor made here (no generated
``*_pb2.py``); :func:`pprof_bytes` writes one, for tests and the bench. Several profiles
merge by summing (:func:`merge`); they must share a unit.
"""

from __future__ import annotations

import gzip
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from hairline.errors import DataError

__all__ = [
    "Frame",
    "Profile",
    "merge",
    "parse_folded",
    "parse_pprof",
    "pprof_bytes",
    "read_profile",
]

UNLABELLED = "(no endpoint)"
_FRAME_FILE = re.compile(r"^(.*\S) \(([^()]+?)(?::\d+)?\)$")
_FOLDED_HINT = (
    "write one stack a line: `ENDPOINT;frame;frame COUNT` (the endpoint first, frames "
    "joined by ';', a space, then a non-negative number)"
)


@dataclass(frozen=True)
class Frame:
    """A function as the profiler named it, and its file when the profiler said."""

    name: str
    file: str = ""


@dataclass(frozen=True)
class Profile:
    """(endpoint, frames from root to leaf) -> cost, in ``unit``."""

    stacks: Mapping[tuple[str, tuple[Frame, ...]], float]
    unit: str = "samples"
    sources: tuple[str, ...] = field(default=())

    @property
    def total(self) -> float:
        return float(sum(self.stacks.values()))

    def endpoint_totals(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for (endpoint, _), cost in self.stacks.items():
            totals[endpoint] = totals.get(endpoint, 0.0) + cost
        return totals


def merge(profiles: Sequence[Profile]) -> Profile:
    """The sum of ``profiles`` (production sampled on several hosts or days)."""
    units = {p.unit for p in profiles}
    if len(units) > 1:
        raise DataError(
            "the profiles have different units: "
            + ", ".join(f"{' '.join(p.sources)} {p.unit}" for p in profiles),
            hint="merge profiles of one kind (all CPU samples, or all nanoseconds)",
        )
    stacks: dict[tuple[str, tuple[Frame, ...]], float] = {}
    for p in profiles:
        for key, cost in p.stacks.items():
            stacks[key] = stacks.get(key, 0.0) + cost
    return Profile(
        stacks,
        unit=next(iter(units), "samples"),
        sources=tuple(s for p in profiles for s in p.sources),
    )


def _frame(text: str) -> Frame:
    match = _FRAME_FILE.match(text)
    return Frame(match.group(1), match.group(2)) if match else Frame(text)


def parse_folded(text: str, *, source: str = "<profile>") -> Profile:
    """Folded stacks, the endpoint as each line's root frame; ``#`` lines are comments."""
    stacks: dict[tuple[str, tuple[Frame, ...]], float] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        stack, _, count_text = line.rpartition(" ")
        where = f"{source}:{number}"
        try:
            count = float(count_text)
        except ValueError:
            count = math.nan
        if not stack or not math.isfinite(count) or count < 0:
            raise DataError(f"{where}: {line[:80]!r} does not end in a count", hint=_FOLDED_HINT)
        names = [name.strip() for name in stack.split(";")]
        if any(not name for name in names):
            raise DataError(f"{where}: {stack[:80]!r} has an empty frame", hint=_FOLDED_HINT)
        key = (names[0], tuple(_frame(name) for name in names[1:]))
        stacks[key] = stacks.get(key, 0.0) + count
    if not stacks:
        raise DataError(f"{source}: the profile has no stack", hint=_FOLDED_HINT)
    return Profile(stacks, unit="samples", sources=(source,))


# --- pprof ----------------------------------------------------------------------------------

# profile.proto (github.com/google/pprof/proto/profile.proto): the fields read here.
_PPROF: dict[str, list[tuple[str, int, str, str]]] = {
    # name: [(field, number, type, label or message)]
    "ValueType": [("type", 1, "int64", ""), ("unit", 2, "int64", "")],
    "Label": [
        ("key", 1, "int64", ""),
        ("str", 2, "int64", ""),
        ("num", 3, "int64", ""),
        ("num_unit", 4, "int64", ""),
    ],
    "Sample": [
        ("location_id", 1, "uint64", "repeated"),
        ("value", 2, "int64", "repeated"),
        ("label", 3, "Label", "repeated"),
    ],
    "Line": [("function_id", 1, "uint64", ""), ("line", 2, "int64", "")],
    "Location": [
        ("id", 1, "uint64", ""),
        ("mapping_id", 2, "uint64", ""),
        ("address", 3, "uint64", ""),
        ("line", 4, "Line", "repeated"),
    ],
    "Function": [
        ("id", 1, "uint64", ""),
        ("name", 2, "int64", ""),
        ("system_name", 3, "int64", ""),
        ("filename", 4, "int64", ""),
        ("start_line", 5, "int64", ""),
    ],
    "Profile": [
        ("sample_type", 1, "ValueType", "repeated"),
        ("sample", 2, "Sample", "repeated"),
        ("location", 4, "Location", "repeated"),
        ("function", 5, "Function", "repeated"),
        ("string_table", 6, "string", "repeated"),
        ("time_nanos", 9, "int64", ""),
        ("duration_nanos", 10, "int64", ""),
        ("period_type", 11, "ValueType", ""),
        ("period", 12, "int64", ""),
        ("default_sample_type", 14, "int64", ""),
    ],
}
_SCALARS = {
    "int64": descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
    "uint64": descriptor_pb2.FieldDescriptorProto.TYPE_UINT64,
    "string": descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
}


@cache
def _pprof_class() -> Any:
    """The ``perftools.profiles.Profile`` message class, made from a descriptor built here
    (in a pool of its own, so it never clashes with a generated one)."""
    proto = descriptor_pb2.FileDescriptorProto(
        name="hairline_pprof.proto", package="perftools.profiles", syntax="proto3"
    )
    for message, fields in _PPROF.items():
        m = proto.message_type.add(name=message)
        for name, number, kind, label in fields:
            f = m.field.add(name=name, number=number)
            f.label = (
                descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
                if label == "repeated"
                else descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
            )
            if kind in _SCALARS:
                f.type = _SCALARS[kind]
            else:
                f.type = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
                f.type_name = f".perftools.profiles.{kind}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("perftools.profiles.Profile"))


def parse_pprof(
    data: bytes, *, source: str = "<profile>", endpoint_label: str = "endpoint"
) -> Profile:
    """A pprof profile (gzipped or not); samples without the label go to "(no endpoint)"."""
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as err:
            raise DataError(f"{source}: not a whole gzip file: {err}") from err
    message: Any = _pprof_class()()
    try:
        message.ParseFromString(data)
    except DecodeError as err:
        raise DataError(
            f"{source}: not a pprof profile ({err})",
            hint="give a pprof protobuf file (`go tool pprof -proto`) or folded stacks",
        ) from err
    strings = list(message.string_table)

    def string(index: int) -> str:
        return strings[index] if 0 <= index < len(strings) else ""

    if not message.sample_type:
        raise DataError(f"{source}: the pprof profile has no sample type")
    chosen = len(message.sample_type) - 1
    if message.default_sample_type:
        wanted = string(message.default_sample_type)
        chosen = next(
            (i for i, t in enumerate(message.sample_type) if string(t.type) == wanted), chosen
        )
    unit = string(message.sample_type[chosen].unit) or "count"
    scale = 1.0
    if (
        unit == "count"
        and message.period > 0
        and string(message.period_type.unit) not in ("", "count")
    ):
        # samples x period: the cost of what was sampled, in the period's unit
        scale, unit = float(message.period), string(message.period_type.unit)
    functions = {f.id: Frame(string(f.name), string(f.filename)) for f in message.function}
    locations: dict[int, tuple[Frame, ...]] = {}
    for loc in message.location:
        # Lines run from the innermost inlined function to its caller; reversed here so
        # that a location's frames read from the root, as stacks do.
        locations[loc.id] = tuple(
            functions.get(line.function_id, Frame(f"0x{loc.address:x}"))
            for line in reversed(loc.line)
        ) or (Frame(f"0x{loc.address:x}"),)
    label_key = endpoint_label
    stacks: dict[tuple[str, tuple[Frame, ...]], float] = {}
    for sample in message.sample:
        if chosen >= len(sample.value):
            raise DataError(f"{source}: a sample has fewer values than sample types")
        endpoint = next(
            (string(lab.str) for lab in sample.label if string(lab.key) == label_key), UNLABELLED
        )
        frames = tuple(
            frame for loc_id in reversed(sample.location_id) for frame in locations.get(loc_id, ())
        )
        key = (endpoint, frames)
        stacks[key] = stacks.get(key, 0.0) + sample.value[chosen] * scale
    if all(endpoint == UNLABELLED for endpoint, _ in stacks):
        raise DataError(
            f"{source}: no sample has the label {endpoint_label!r} naming its endpoint",
            hint='label samples with the endpoint (Go: pprof.Do(ctx, pprof.Labels("endpoint", '
            "...))) or pass --endpoint-label with the key the profile uses",
        )
    return Profile(stacks, unit=unit, sources=(source,))


def pprof_bytes(
    stacks: Iterable[tuple[str, Sequence[Frame], int]],
    *,
    endpoint_label: str = "endpoint",
    sample_type: tuple[str, str] = ("samples", "count"),
    period: tuple[str, str, int] | None = None,
    compress: bool = True,
) -> bytes:
    """A pprof profile of ``(endpoint, frames root to leaf, value)`` stacks."""
    message: Any = _pprof_class()()
    strings: dict[str, int] = {"": 0}

    def index(text: str) -> int:
        return strings.setdefault(text, len(strings))

    message.sample_type.add(type=index(sample_type[0]), unit=index(sample_type[1]))
    if period is not None:
        message.period_type.type = index(period[0])
        message.period_type.unit = index(period[1])
        message.period = period[2]
    ids: dict[Frame, int] = {}
    for endpoint, frames, value in stacks:
        for frame in frames:
            if frame not in ids:
                ids[frame] = len(ids) + 1
                message.function.add(
                    id=ids[frame], name=index(frame.name), filename=index(frame.file)
                )
                message.location.add(id=ids[frame]).line.add(function_id=ids[frame])
        sample = message.sample.add(location_id=[ids[f] for f in reversed(frames)], value=[value])
        sample.label.add(key=index(endpoint_label), str=index(endpoint))
    message.string_table.extend(strings)
    data: bytes = message.SerializeToString()
    return gzip.compress(data, mtime=0) if compress else data


def read_profile(path: Path, *, endpoint_label: str = "endpoint") -> Profile:
    """A profile file: pprof when it is gzip or not text, else folded stacks."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise DataError(
            f"cannot read the profile {path}: {err.strerror or err}",
            hint="pass --profile FILE: folded stacks or a pprof file",
        ) from err
    if data[:2] == b"\x1f\x8b":
        return parse_pprof(data, source=str(path), endpoint_label=endpoint_label)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return parse_pprof(data, source=str(path), endpoint_label=endpoint_label)
    return parse_folded(text, source=str(path))
