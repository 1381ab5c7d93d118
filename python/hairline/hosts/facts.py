"""Host facts: what a run's numbers depend on besides the code (CPU, kernel, turbo, ...).

The lab stores these with every run and warns when the hosts of one experiment differ
(ServiceLab section 2.2: results are comparable only between similar machines). Facts come
from procfs and sysfs under ``root``, so a test can point it at a tree of files it wrote;
the hostname, architecture and kernel release come from ``os.uname()``. A fact that cannot
be read is ``"unknown"`` (``0`` for the counts), never an exception: a missing file says
something about the machine, not about the user's input.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from hairline.kit.cpulist import parse_cpu_list

__all__ = ["COMPARED_FACTS", "HostFacts", "probe_facts", "similar"]

UNKNOWN = "unknown"
# The facts that change how fast the same code runs; hostname, cores and memory do not
# (an arm runs on a CPU set of its own, and memory is rarely the bottleneck).
COMPARED_FACTS = ("cpu_model", "arch", "kernel", "turbo", "governor", "smt")

_CPU = Path("sys/devices/system/cpu")


@dataclass(frozen=True)
class HostFacts:
    """One host's facts; ``cores`` and ``memory_bytes`` are 0 when unknown."""

    hostname: str
    cpu_model: str
    arch: str
    kernel: str
    turbo: str  # "on" | "off" | "unknown"
    governor: str  # scaling governor of the probed cpus ("a,b" if they differ), or "unknown"
    cores: int  # online CPUs of the machine
    memory_bytes: int
    smt: str  # "on" | "off" | "unknown"

    def as_dict(self) -> dict[str, str]:
        """Every fact as a string, for a store's key/value table or a report."""
        return {f.name: str(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_dict(cls, facts: Mapping[str, str]) -> HostFacts:
        """The inverse of :meth:`as_dict`; missing or unreadable facts become unknown."""

        def count(name: str) -> int:
            try:
                return max(int(facts.get(name, "0")), 0)
            except ValueError:
                return 0

        def text(name: str) -> str:
            return str(facts.get(name, UNKNOWN))

        return cls(
            hostname=text("hostname"),
            cpu_model=text("cpu_model"),
            arch=text("arch"),
            kernel=text("kernel"),
            turbo=text("turbo"),
            governor=text("governor"),
            cores=count("cores"),
            memory_bytes=count("memory_bytes"),
            smt=text("smt"),
        )


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except (OSError, ValueError):
        return None


def _parse_cpu_list(text: str) -> list[int]:
    """The kernel's CPU list format ("0-3,8,10-11") to numbers; [] if malformed."""
    try:
        return list(parse_cpu_list(text))
    except ValueError:
        return []


def _cpuinfo_blocks(text: str) -> dict[int, dict[str, str]]:
    """/proc/cpuinfo as {processor number: {field: value}}."""
    blocks: dict[int, dict[str, str]] = {}
    current: dict[str, str] = {}
    for line in [*text.splitlines(), ""]:
        if not line.strip():
            number = current.get("processor", "")
            if number.isdigit():
                blocks[int(number)] = current
            current = {}
            continue
        name, sep, value = line.partition(":")
        if sep:
            current.setdefault(name.strip(), value.strip())
    return blocks


def _model(block: Mapping[str, str]) -> str | None:
    # x86 says "model name"; other architectures name the CPU differently, or only by ids.
    for name in ("model name", "Model", "cpu model", "cpu"):
        if block.get(name):
            return block[name]
    if "CPU implementer" in block and "CPU part" in block:
        return f"implementer {block['CPU implementer']} part {block['CPU part']}"
    return None


def _cpu_model(cpuinfo: str | None, cpus: Sequence[int]) -> str:
    if cpuinfo is None:
        return UNKNOWN
    blocks = _cpuinfo_blocks(cpuinfo)
    models: list[str] = []
    for cpu in cpus:
        model = _model(blocks.get(cpu, {}))
        if model is not None and model not in models:
            models.append(model)
    if models:
        return " + ".join(models)
    if not blocks:
        # 32-bit arm kernels name the board once, outside any per-processor block.
        for line in cpuinfo.splitlines():
            name, _, value = line.partition(":")
            if name.strip() == "Hardware" and value.strip():
                return value.strip()
    return UNKNOWN


def _turbo(root: Path, cpus: Sequence[int]) -> str:
    no_turbo = _read(root / _CPU / "intel_pstate" / "no_turbo")
    if no_turbo in ("0", "1"):
        return "on" if no_turbo == "0" else "off"
    boost = _read(root / _CPU / "cpufreq" / "boost")
    if boost in ("0", "1"):
        return "on" if boost == "1" else "off"
    # amd-pstate and newer acpi-cpufreq report boost per CPU.
    per_cpu = {_read(root / _CPU / f"cpu{cpu}" / "cpufreq" / "boost") for cpu in cpus}
    if per_cpu == {"1"}:
        return "on"
    if per_cpu == {"0"}:
        return "off"
    return UNKNOWN


def _governor(root: Path, cpus: Sequence[int]) -> str:
    found = {
        _read(root / _CPU / f"cpu{cpu}" / "cpufreq" / "scaling_governor") or UNKNOWN for cpu in cpus
    }
    return ",".join(sorted(found)) if found else UNKNOWN


def _smt(root: Path) -> str:
    active = _read(root / _CPU / "smt" / "active")
    if active in ("0", "1"):
        return "on" if active == "1" else "off"
    return UNKNOWN


def _memory_bytes(meminfo: str | None) -> int:
    for line in (meminfo or "").splitlines():
        name, _, value = line.partition(":")
        if name == "MemTotal":
            words = value.split()
            if words and words[0].isdigit():
                unit = 1024 if len(words) > 1 and words[1].lower() == "kb" else 1
                return int(words[0]) * unit
    return 0


def _online_cpus(root: Path, cpuinfo: str | None) -> list[int]:
    online = _read(root / _CPU / "online")
    cpus = _parse_cpu_list(online) if online else []
    if not cpus and cpuinfo is not None:
        cpus = sorted(_cpuinfo_blocks(cpuinfo))
    return cpus


def probe_facts(cpus: Sequence[int] | None = None, *, root: Path = Path("/")) -> HostFacts:
    """Probe this machine; ``cpus`` (default: every online CPU) are the ones an arm uses.

    The CPU model, turbo and governor are those of ``cpus``; ``cores`` counts the
    machine's online CPUs. Never raises for a missing or malformed file.
    """
    cpuinfo = _read(root / "proc" / "cpuinfo")
    online = _online_cpus(root, cpuinfo)
    probed = list(cpus) if cpus is not None else online
    uname = os.uname()
    return HostFacts(
        hostname=uname.nodename or UNKNOWN,
        cpu_model=_cpu_model(cpuinfo, probed),
        arch=uname.machine or UNKNOWN,
        kernel=uname.release or UNKNOWN,
        turbo=_turbo(root, probed),
        governor=_governor(root, probed),
        cores=len(online),
        memory_bytes=_memory_bytes(_read(root / "proc" / "meminfo")),
        smt=_smt(root),
    )


def similar(a: HostFacts, b: HostFacts) -> list[str]:
    """The names of the facts in :data:`COMPARED_FACTS` that differ; [] for similar hosts.

    "unknown" differs from a known value: the lab cannot vouch that such hosts match.
    """
    return [name for name in COMPARED_FACTS if getattr(a, name) != getattr(b, name)]
