"""Host facts from a procfs/sysfs tree written in tmp, and from this machine.

A fake tree is a fixture of real files, read by the same code as ``/``::

    write_host(tmp_path, governors={0: "performance"}, no_turbo="1")
    assert probe_facts(root=tmp_path).turbo == "off"
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from hairline.hosts.facts import COMPARED_FACTS, HostFacts, probe_facts, similar

CPUINFO = """\
processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz
flags\t\t: fpu vme

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz
flags\t\t: fpu vme

processor\t: 2
model name\t: Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz

processor\t: 3
model name\t: Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz
"""

ARM_CPUINFO = """\
processor\t: 0
BogoMIPS\t: 50.00
CPU implementer\t: 0x41
CPU part\t: 0xd0c

processor\t: 1
BogoMIPS\t: 50.00
CPU implementer\t: 0x41
CPU part\t: 0xd0c
"""

CPU = Path("sys/devices/system/cpu")


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def write_host(
    root: Path,
    *,
    cpuinfo: str = CPUINFO,
    online: str = "0-3\n",
    governors: dict[int, str] | None = None,
    no_turbo: str | None = None,
    boost: str | None = None,
    smt_active: str | None = "1\n",
    mem_total_kb: int = 16_384_000,
) -> Path:
    write(root / "proc" / "cpuinfo", cpuinfo)
    write(root / "proc" / "meminfo", f"MemTotal:       {mem_total_kb} kB\nMemFree:   12 kB\n")
    write(root / CPU / "online", online)
    for cpu, governor in (governors or {}).items():
        write(root / CPU / f"cpu{cpu}" / "cpufreq" / "scaling_governor", governor + "\n")
    if no_turbo is not None:
        write(root / CPU / "intel_pstate" / "no_turbo", no_turbo + "\n")
    if boost is not None:
        write(root / CPU / "cpufreq" / "boost", boost + "\n")
    if smt_active is not None:
        write(root / CPU / "smt" / "active", smt_active)
    return root


def test_a_tuned_intel_host(tmp_path: Path) -> None:
    root = write_host(tmp_path, governors=dict.fromkeys(range(4), "performance"), no_turbo="1")
    facts = probe_facts(root=root)
    assert facts.cpu_model == "Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz"
    assert (facts.turbo, facts.governor, facts.smt) == ("off", "performance", "on")
    assert facts.cores == 4
    assert facts.memory_bytes == 16_384_000 * 1024
    # These describe the running kernel, whatever tree the CPU facts come from.
    assert (facts.hostname, facts.arch, facts.kernel) == (
        os.uname().nodename,
        os.uname().machine,
        os.uname().release,
    )


def test_governor_and_turbo_are_those_of_the_probed_cpus(tmp_path: Path) -> None:
    governors = {0: "powersave", 1: "powersave", 2: "performance", 3: "performance"}
    root = write_host(tmp_path, governors=governors, boost="1", smt_active="0\n")
    assert probe_facts([2, 3], root=root).governor == "performance"
    assert probe_facts(root=root).governor == "performance,powersave"
    assert probe_facts(root=root).turbo == "on"
    assert probe_facts(root=root).smt == "off"
    assert probe_facts([2], root=root).cores == 4  # the machine's, not the CPU set's


def test_per_cpu_boost_counts_when_there_is_no_global_switch(tmp_path: Path) -> None:
    root = write_host(tmp_path)
    for cpu in range(4):
        write(root / CPU / f"cpu{cpu}" / "cpufreq" / "boost", "0\n")
    assert probe_facts(root=root).turbo == "off"


def test_arm_cpus_are_named_by_their_ids(tmp_path: Path) -> None:
    root = write_host(tmp_path, cpuinfo=ARM_CPUINFO, online="0-1\n")
    assert probe_facts(root=root).cpu_model == "implementer 0x41 part 0xd0c"


def test_an_empty_tree_gives_unknowns_not_errors(tmp_path: Path) -> None:
    facts = probe_facts(root=tmp_path)
    assert (facts.cpu_model, facts.turbo, facts.governor, facts.smt) == ("unknown",) * 4
    assert (facts.cores, facts.memory_bytes) == (0, 0)
    assert probe_facts([0, 7], root=tmp_path).governor == "unknown"


def test_malformed_files_give_unknowns(tmp_path: Path) -> None:
    write(tmp_path / "proc" / "cpuinfo", "garbage without colons\n\n\n")
    write(tmp_path / "proc" / "meminfo", "MemTotal: lots\n")
    write(tmp_path / CPU / "online", "zero-three")
    write(tmp_path / CPU / "smt" / "active", "forceoff")
    facts = probe_facts(root=tmp_path)
    assert (facts.cpu_model, facts.smt, facts.cores, facts.memory_bytes) == (
        "unknown",
        "unknown",
        0,
        0,
    )


def test_cores_fall_back_to_cpuinfo_without_sysfs(tmp_path: Path) -> None:
    write(tmp_path / "proc" / "cpuinfo", CPUINFO)
    assert probe_facts(root=tmp_path).cores == 4


def test_this_machine() -> None:
    facts = probe_facts()
    assert facts.cores == os.cpu_count()  # both count online CPUs
    assert facts.memory_bytes > 0
    assert facts.arch == os.uname().machine
    assert facts.turbo in ("on", "off", "unknown") and facts.smt in ("on", "off", "unknown")
    assert facts.cpu_model


def test_similar_names_the_facts_that_differ() -> None:
    a = HostFacts(
        hostname="a",
        cpu_model="Xeon",
        arch="x86_64",
        kernel="6.1.0",
        turbo="off",
        governor="performance",
        cores=8,
        memory_bytes=1 << 34,
        smt="on",
    )
    assert similar(a, replace(a, hostname="b", cores=16, memory_bytes=1 << 35)) == []
    assert similar(a, replace(a, kernel="6.8.0", turbo="unknown")) == ["kernel", "turbo"]
    everything = replace(
        a, cpu_model="EPYC", arch="aarch64", kernel="5", turbo="on", governor="x", smt="off"
    )
    assert similar(a, everything) == list(COMPARED_FACTS)


def test_facts_round_trip_through_a_string_dict(tmp_path: Path) -> None:
    facts = probe_facts(root=write_host(tmp_path, governors={0: "performance"}))
    stored = facts.as_dict()
    assert all(isinstance(v, str) for v in stored.values())
    assert stored["memory_bytes"] == str(16_384_000 * 1024)
    assert HostFacts.from_dict(stored) == facts
    assert HostFacts.from_dict({}).cpu_model == "unknown"
