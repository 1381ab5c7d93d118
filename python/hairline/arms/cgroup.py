"""Arms in cgroups: whatever an arm starts is counted and killed with it.

A process group is not a container: a start command whose child calls ``setsid`` leaves the
group and outlived the experiment, and CPU read from ``/proc/PID/task/*`` at the end of a
batch misses every thread (or forked child) that exited meanwhile, so a thread-per-connection
server was measured at 1% of what it used. A cgroup fixes both: the kernel charges CPU to the
cgroup as it is spent, exited tasks included, and membership is inherited by every fork,
whatever it does to its session.

Two layouts are real and both are supported:

- **v2** (the unified hierarchy, most machines today): one directory per arm; CPU from
  ``cpu.stat`` ``usage_usec``, anonymous memory from ``memory.stat`` ``anon`` and
  ``memory.peak`` when the memory controller is enabled, ``cgroup.kill`` to stop.
- **v1** (separate controller hierarchies, as on hairline's development and CI machines,
  which mount v1 controllers beside an empty unified hierarchy): one directory per arm in
  each of ``cpuacct`` (``cpuacct.usage``, ns), ``memory`` (``memory.stat`` ``total_rss``)
  and ``freezer`` (freeze, kill every task, thaw).

``HAIRLINE_CGROUP`` chooses: ``auto`` (default: v2 when the unified hierarchy has the memory
controller, else v1 when ``cpuacct`` is mounted, else v2 with its core files, else none),
``v2``, ``v1`` or ``none``. Arm cgroups live in a ``hairline`` directory under this
process's own cgroup and are named ``<prefix><arm>-<port>``, where the lab's prefix names the
store and the experiment, so a processor taking over an experiment finds and kills what a
dead one left by name (:func:`sweep`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = [
    "ArmCgroup",
    "CgroupMode",
    "Hierarchies",
    "cgroup_mode",
    "cgroup_name",
    "create_cgroup",
    "probe",
    "remove_named",
    "sweep",
]

CgroupMode = Literal["v2", "v1", "none"]
# pids: the limit on a sandboxed build's processes (lab/build/sandbox.py).
_V1_CONTROLLERS = ("cpuacct", "memory", "freezer", "pids")
_KILL_TIMEOUT_S = 5.0
# Where the processes of hairline's own v2 cgroup go when they keep it from delegating the
# memory controller (v2's rule: a cgroup that enables controllers for its children holds no
# processes itself, as under systemd, whose service and session cgroups hold theirs).
LEAF = "hairline-leaf"


@dataclass(frozen=True)
class Hierarchies:
    """What this machine mounts, and where this process's own cgroups are.

    ``v2`` is the unified hierarchy's directory that holds this process's cgroup (or None);
    ``v1`` maps each mounted v1 controller of interest to the same. Arm cgroups are made
    under these, so they count against whatever limits this process's own cgroup has.
    """

    v2: Path | None
    v2_controllers: frozenset[str]
    v1: dict[str, Path]


def _own_paths(proc: Path) -> dict[str, str]:
    """``/proc/self/cgroup``: hierarchy key ("" for v2, else a controller) -> own path."""
    own: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in (proc / "self" / "cgroup").read_text().splitlines():
            parts = line.split(":", 2)
            if len(parts) != 3:
                continue
            for controller in parts[1].split(",") if parts[1] else [""]:
                own[controller] = parts[2]
    return own


def _inside(mount: Path, mount_root: str, own: str) -> Path:
    """Where this process's cgroup ``own`` sits under a hierarchy mounted at ``mount`` whose
    mount shows the hierarchy from ``mount_root`` (a container sees only part of it)."""
    relative = os.path.relpath(own, mount_root) if own.startswith(mount_root) else "."
    return (mount / relative).resolve() if relative != "." else mount


def probe(*, proc: Path = Path("/proc")) -> Hierarchies:
    """Read the cgroup mounts from ``/proc/self/mountinfo``."""
    own = _own_paths(proc)
    v2: Path | None = None
    v1: dict[str, Path] = {}
    try:
        lines = (proc / "self" / "mountinfo").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        root, mount, fstype = fields[3], Path(fields[4]), tail[0]
        if fstype == "cgroup2" and v2 is None:
            own_v2 = own.get("", "/")
            # Moved to the leaf by an earlier arm (_to_leaf): the cgroup is still the parent.
            if own_v2.rstrip("/").endswith("/" + LEAF):
                own_v2 = own_v2.rstrip("/")[: -len(LEAF) - 1] or "/"
            v2 = _inside(mount, root, own_v2)
        elif fstype == "cgroup":
            for controller in tail[2].split(","):
                if controller in _V1_CONTROLLERS and controller not in v1:
                    v1[controller] = _inside(mount, root, own.get(controller, "/"))
    controllers: frozenset[str] = frozenset()
    if v2 is not None:
        with contextlib.suppress(OSError):
            controllers = frozenset((v2 / "cgroup.controllers").read_text().split())
    return Hierarchies(v2=v2, v2_controllers=controllers, v1=v1)


def cgroup_mode(hierarchies: Hierarchies, wanted: str | None = None) -> CgroupMode:
    """The mode to use: ``wanted`` (default ``$HAIRLINE_CGROUP`` or auto) if the machine has
    it, else none. Raises ValueError for a name that is no mode."""
    wanted = (wanted or os.environ.get("HAIRLINE_CGROUP") or "auto").strip().lower()
    if wanted not in ("auto", "v2", "v1", "none"):
        raise ValueError(f"HAIRLINE_CGROUP={wanted!r}: expected auto, v2, v1 or none")
    has_v2 = hierarchies.v2 is not None
    has_v1 = "cpuacct" in hierarchies.v1
    if wanted == "v2":
        return "v2" if has_v2 else "none"
    if wanted == "v1":
        return "v1" if has_v1 else "none"
    if wanted == "none":
        return "none"
    if has_v2 and "memory" in hierarchies.v2_controllers:
        return "v2"
    if has_v1:
        return "v1"
    return "v2" if has_v2 else "none"


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _stat_field(path: Path, key: str) -> int | None:
    """One ``key value`` line of a flat-keyed cgroup file (``cpu.stat``, ``memory.stat``)."""
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        return None
    return None


class ArmCgroup:
    """One arm's cgroup: a directory per hierarchy used (one for v2, one per controller for
    v1). Processes join it before they exec (:attr:`procs_files`)."""

    def __init__(self, mode: CgroupMode, dirs: dict[str, Path], memory_fallback: str = "") -> None:
        self.mode = mode
        self.dirs = dirs
        # Why memory is not read from the cgroup ("" when it is): the arm then reads it from
        # procfs, and the report says so.
        self.memory_fallback = memory_fallback

    @property
    def name(self) -> str:
        return next(iter(self.dirs.values())).name

    @property
    def procs_files(self) -> tuple[str, ...]:
        """The ``cgroup.procs`` files a new process writes its pid into to join."""
        return tuple(str(d / "cgroup.procs") for d in self.dirs.values())

    @property
    def source(self) -> str:
        """Where CPU and memory are read from, for reports."""
        if self.mode == "v2":
            where = f"cgroup v2 ({self.dirs['v2']})"
        else:
            where = f"cgroup v1 ({', '.join(sorted(self.dirs))})"
        return where + (
            f"; memory from procfs ({self.memory_fallback})" if self.memory_fallback else ""
        )

    def pids(self) -> list[int]:
        seen: set[int] = set()
        for d in self.dirs.values():
            with contextlib.suppress(OSError):
                seen.update(int(p) for p in (d / "cgroup.procs").read_text().split())
        return sorted(seen)

    def cpu_ns(self) -> int:
        """CPU time charged to the cgroup since it was made, exited tasks included."""
        if self.mode == "v2":
            usec = _stat_field(self.dirs["v2"] / "cpu.stat", "usage_usec")
            return (usec or 0) * 1000
        return _read_int(self.dirs["cpuacct"] / "cpuacct.usage") or 0

    def anon_memory_bytes(self) -> int | None:
        """Anonymous memory now, or None where the memory controller is not available."""
        if self.mode == "v2":
            return _stat_field(self.dirs["v2"] / "memory.stat", "anon")
        if "memory" in self.dirs:
            return _stat_field(self.dirs["memory"] / "memory.stat", "total_rss")
        return None

    def peak_memory_bytes(self) -> int | None:
        """Peak memory charged since the cgroup was made (v2's ``memory.peak``). None on v1,
        whose ``max_usage_in_bytes`` also counts page cache, and so the files a run happens
        to read: +30% between two arms serving the same site."""
        if self.mode == "v2":
            return _read_int(self.dirs["v2"] / "memory.peak")
        return None

    def limit(self, *, pids_max: int, memory_bytes: int) -> list[str]:
        """Cap the processes (and threads) and the memory of what runs in the cgroup; the
        limits that could not be set, with why (no such controller here, or refused)."""
        files: dict[str, Path | None]
        if self.mode == "v2":
            files = {"pids.max": self.dirs["v2"], "memory.max": self.dirs["v2"]}
        else:
            files = {
                "pids.max": self.dirs.get("pids"),
                "memory.limit_in_bytes": self.dirs.get("memory"),
            }
        values = {"pids.max": pids_max, "memory.max": memory_bytes,
                  "memory.limit_in_bytes": memory_bytes}  # fmt: skip
        missing = []
        for file, directory in files.items():
            if directory is None:
                missing.append(f"{file}: no {file.split('.')[0]} controller in cgroup {self.mode}")
                continue
            try:
                (directory / file).write_text(str(values[file]))
            except OSError as err:
                missing.append(f"{file}: {err.strerror or err}")
        return missing

    def kill(self, *, timeout_s: float = _KILL_TIMEOUT_S) -> bool:
        """SIGKILL every process in the cgroup, daemons included; True once it is empty."""
        deadline = time.monotonic() + timeout_s
        if self.mode == "v2":
            kill_file = self.dirs["v2"] / "cgroup.kill"
            if kill_file.exists():
                with contextlib.suppress(OSError):
                    kill_file.write_text("1")
        frozen = self._freeze(True)
        # A frozen cgroup cannot fork while we kill; without a freezer, loop until empty.
        while True:
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if frozen:
                self._freeze(False)
                frozen = False
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        if frozen:
            self._freeze(False)
        return True

    def _freeze(self, frozen: bool) -> bool:
        if self.mode == "v2":
            path, value = self.dirs["v2"] / "cgroup.freeze", "1" if frozen else "0"
        elif "freezer" in self.dirs:
            path, value = self.dirs["freezer"] / "freezer.state", "FROZEN" if frozen else "THAWED"
        else:
            return False
        try:
            path.write_text(value)
        except OSError:
            return False
        return True

    def remove(self, *, timeout_s: float = _KILL_TIMEOUT_S) -> bool:
        """Kill what is left and remove the directories; True if all are gone."""
        self.kill(timeout_s=timeout_s)
        deadline = time.monotonic() + timeout_s
        for d in self.dirs.values():
            while d.exists():
                try:
                    d.rmdir()
                except FileNotFoundError:
                    break
                except OSError:
                    # Killed tasks leave the cgroup when their parent has reaped them. A
                    # process forked before the kill joins the cgroup only before its exec,
                    # so it may arrive after the kill above: Ctrl-C inside Popen left the
                    # arm's service running in it, never signalled, 1 run in 4. Kill again.
                    if time.monotonic() > deadline:
                        return False
                    self.kill(timeout_s=0.0)
                    time.sleep(0.02)
            # The shared parent goes with its last arm, so nothing of hairline stays behind.
            with contextlib.suppress(OSError):
                d.parent.rmdir()
        return True


def _base_dirs(mode: CgroupMode, hierarchies: Hierarchies) -> dict[str, Path]:
    if mode == "v2" and hierarchies.v2 is not None:
        return {"v2": hierarchies.v2 / "hairline"}
    if mode == "v1":
        return {c: p / "hairline" for c, p in hierarchies.v1.items()}
    return {}


Write = Callable[[Path, str], None]


def _write(path: Path, text: str) -> None:
    path.write_text(text)


def _to_leaf(parent: Path, write: Write) -> None:
    """Move every process of ``parent`` into its child ``LEAF`` (hairline's own process
    included), so that ``parent`` may enable controllers for its children. A few rounds: a
    process may fork while the others move."""
    leaf = parent / LEAF
    leaf.mkdir(exist_ok=True)
    for _ in range(3):
        try:
            pids = (parent / "cgroup.procs").read_text().split()
        except OSError:
            return
        if not pids:
            return
        for pid in pids:
            # A process that exited meanwhile, or a kernel thread, stays: the retry says.
            with contextlib.suppress(OSError):
                write(leaf / "cgroup.procs", pid)


def _enable_v2_controllers(
    base: Path, parent: Path, available: frozenset[str], *, write: Write = _write
) -> str:
    """Let arm cgroups have the memory, cpu and pids controllers where the parent allows it;
    why memory cannot be had ("" when it can). A parent that holds processes cannot enable
    them (EBUSY): its processes move to a leaf first (:func:`_to_leaf`). CPU usage is a core
    file and is read all the same; memory then comes from procfs, and the report says so."""
    if "memory" not in available:
        return f"the unified hierarchy offers no memory controller at {parent} (cgroup.controllers)"
    why = ""
    for directory in (parent, base):
        for controller in (c for c in ("cpu", "memory", "pids") if c in available):
            control = directory / "cgroup.subtree_control"
            try:
                try:
                    write(control, f"+{controller}")
                except OSError as err:
                    if err.errno != errno.EBUSY or directory != parent:
                        raise
                    _to_leaf(parent, write)
                    write(control, f"+{controller}")
            except OSError as err:
                if controller == "memory" and not why:
                    why = f"+memory could not be enabled in {control}: {err.strerror or err}"
    return why


def create_cgroup(
    name: str, *, mode: str | None = None, hierarchies: Hierarchies | None = None
) -> tuple[ArmCgroup | None, str]:
    """Make the cgroup ``name`` for one arm. Returns it, or None and the reason it could not
    be made (so the caller can fall back to procfs and say why)."""
    hierarchies = hierarchies or probe()
    try:
        chosen = cgroup_mode(hierarchies, mode)
    except ValueError as err:
        return None, str(err)
    if chosen == "none":
        return None, "no cgroup hierarchy is usable here (or HAIRLINE_CGROUP=none)"
    dirs: dict[str, Path] = {}
    memory_fallback = ""
    try:
        for key, base in _base_dirs(chosen, hierarchies).items():
            for attempt in range(3):
                base.mkdir(exist_ok=True)
                if key == "v2":
                    memory_fallback = _enable_v2_controllers(
                        base, base.parent, hierarchies.v2_controllers
                    )
                try:
                    (base / name).mkdir(exist_ok=True)
                    break
                except FileNotFoundError:
                    # Another arm's removal took the empty parent away meanwhile.
                    if attempt == 2:
                        raise
            directory = base / name
            if not os.access(directory / "cgroup.procs", os.W_OK):
                raise PermissionError(f"{directory / 'cgroup.procs'} is not writable")
            dirs[key] = directory
    except OSError as err:
        ArmCgroup(chosen, dirs).remove(timeout_s=0.5)
        return None, f"cannot make a {chosen} cgroup: {err}"
    except BaseException:
        # Ctrl-C between two hierarchies: the caller never sees the cgroup, so nobody else
        # would remove what was made.
        ArmCgroup(chosen, dirs).remove(timeout_s=0.5)
        raise
    return ArmCgroup(chosen, dirs, _memory_fallback(chosen, dirs, memory_fallback)), ""


def _memory_fallback(mode: CgroupMode, dirs: dict[str, Path], why: str) -> str:
    """Why the arm's memory cannot come from its cgroup ("" when it can): v2 without the
    memory controller in the arm's ``cgroup.controllers``, or v1 without a memory hierarchy."""
    if mode == "v1":
        return "" if "memory" in dirs else "no cgroup v1 memory hierarchy is mounted"
    try:
        controllers = (dirs["v2"] / "cgroup.controllers").read_text().split()
    except OSError as err:
        return why or f"{dirs['v2'] / 'cgroup.controllers'}: {err.strerror or err}"
    if "memory" in controllers:
        return ""
    return why or f"the memory controller is not enabled for {dirs['v2']}"


def remove_named(name: str, *, hierarchies: Hierarchies | None = None) -> list[str]:
    """Kill and remove the arm cgroup ``name`` exactly, in every hierarchy of both modes,
    wherever it was made; the modes it was found in."""
    hierarchies = hierarchies or probe()
    found = []
    for mode in ("v2", "v1"):
        dirs = {k: base / name for k, base in _base_dirs(mode, hierarchies).items()}
        dirs = {k: d for k, d in dirs.items() if d.is_dir()}
        if dirs:
            ArmCgroup(mode, dirs).remove()
            found.append(mode)
    return found


def cgroup_name(prefix: str, arm: str, port: int) -> str:
    """An arm's cgroup: the lab's prefix (store and experiment) then arm and port; only
    characters a cgroup name may hold."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{prefix}{arm}-{port}")


def _arm_cgroups(prefix: str, hierarchies: Hierarchies) -> Iterator[ArmCgroup]:
    for mode in ("v2", "v1"):
        groups: dict[str, dict[str, Path]] = {}
        for key, base in _base_dirs(mode, hierarchies).items():
            with contextlib.suppress(OSError):
                for d in base.iterdir():
                    if d.is_dir() and d.name.startswith(prefix):
                        groups.setdefault(d.name, {})[key] = d
        for dirs in groups.values():
            yield ArmCgroup(mode, dirs)


def sweep(
    prefix: str,
    *,
    hierarchies: Hierarchies | None = None,
    keep: Callable[[str], bool] | None = None,
) -> list[str]:
    """Kill and remove every arm cgroup whose name starts with ``prefix`` (in both modes)
    and that ``keep`` (given the name) does not keep; the names of those removed."""
    found = []
    for group in _arm_cgroups(prefix, hierarchies or probe()):
        if keep is not None and keep(group.name):
            continue
        group.remove()
        found.append(group.name)
    return sorted(set(found))
