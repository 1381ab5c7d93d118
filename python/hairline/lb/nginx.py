"""Open-source nginx as a Kraken load balancer: per-server weights in an ``upstream`` block,
changed by rewriting the file that holds it (atomically) and a graceful reload.

Open-source nginx has no API for weights (NGINX Plus's ``/api`` is not in it), so the file
is the state: :meth:`NginxUpstream.weights` reads it, :meth:`~NginxUpstream.set_weights`
rewrites every server's line in one file and reloads once (``nginx -c CONF -s reload``,
which checks the whole configuration before it signals the master), then waits until the
master has started its new workers, so that the new weights serve when it returns.

The upstream file is nginx's own syntax, one ``server`` a line, each line ending with a
comment that names the server (the name ``[test] servers`` uses)::

    upstream web {
        keepalive 32;
        server 10.0.0.1:8080 weight=10;  # web1
        server 10.0.0.2:8080 weight=10 max_fails=3;  # web2
        server 10.0.0.9:8080 weight=160;  # rest
    }

Weights: hairline's weight 0 (no new requests, HAProxy's drained server) is nginx's
``down`` (nginx refuses ``weight=0``); the line keeps its ``weight=`` so that lifting
``down`` restores it. Any other weight is ``weight=N`` (nginx's smooth weighted round robin
gives each server a share in proportion to it, as HAProxy's ``roundrobin`` does). A line
without ``weight=`` has weight 1; a ``down`` line reads as 0. Everything else in the file
(other directives, other parameters, comments, other upstreams) is kept as written.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hairline.errors import LoadBalancerError, LoadBalancerGone
from hairline.kit.atomic import atomic_path

__all__ = [
    "NGINX",
    "NginxUpstream",
    "UpstreamServer",
    "parse_upstream",
    "with_weights",
]

NGINX = Path("/usr/sbin/nginx")
#: Where Debian's nginx keeps its pid without a ``pid`` directive, and its prefix (what
#: relative paths are relative to): its build's ``--pid-path`` and ``--prefix``.
_DEFAULT_PID = Path("/run/nginx.pid")
_PREFIX = Path("/usr/share/nginx")
_RELOAD_TIMEOUT_S = 5.0
_SERVER = re.compile(
    r"^(?P<indent>\s*)server\s+(?P<address>[^\s;]+)(?P<params>[^;]*);(?P<rest>.*)$"
)
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_PID_DIRECTIVE = re.compile(r"^\s*pid\s+([^;\s]+)\s*;", re.MULTILINE)


@dataclass(frozen=True)
class UpstreamServer:
    """One ``server`` line of the upstream block: its name (from the line's comment), its
    address, its weight as hairline reads it (0 for ``down``) and its line (from 1)."""

    name: str
    address: str
    weight: int
    line: int


def _code(line: str) -> str:
    """The line without its comment."""
    return line.split("#", 1)[0]


def _block(text: str, upstream: str, path: Path) -> tuple[int, int]:
    """The indexes of the lines inside ``upstream NAME { ... }`` (after the opening line,
    up to the closing one)."""
    lines = text.splitlines()
    opening = re.compile(rf"^\s*upstream\s+{re.escape(upstream)}\s*\{{\s*$")
    for i, line in enumerate(lines):
        if opening.match(_code(line)):
            for j in range(i + 1, len(lines)):
                if "}" in _code(lines[j]):
                    return i + 1, j
            break
    raise LoadBalancerError(
        f"{path} has no `upstream {upstream} {{ ... }}` block (its opening brace on the "
        "`upstream` line, its closing brace on a line of its own)",
        hint=f"check [lb] upstream_file and backend: backend names the upstream block "
        f"({upstream!r}) that the file at upstream_file holds",
    )


def _weight_of(tokens: list[str], path: Path, number: int) -> int:
    if "down" in tokens:
        return 0
    given = [t for t in tokens if t.startswith("weight=")]
    if not given:
        return 1
    value = given[-1].removeprefix("weight=")
    if not value.isdigit() or int(value) < 1:
        raise LoadBalancerError(
            f"{path}:{number}: {given[-1]!r} is not an nginx weight",
            hint="nginx weights are whole numbers from 1; write `down` for no traffic",
        )
    return int(value)


def parse_upstream(text: str, upstream: str, path: Path) -> list[UpstreamServer]:
    """The named servers of ``upstream`` in ``text`` (the file at ``path``, for messages)."""
    start, end = _block(text, upstream, path)
    lines = text.splitlines()
    servers: list[UpstreamServer] = []
    for index in range(start, end):
        line, number = lines[index], index + 1
        code = _code(line)
        if not re.match(r"^\s*server\b", code):
            continue
        match = _SERVER.match(line)
        if match is None or code.count(";") != 1:
            raise LoadBalancerError(
                f"{path}:{number}: `{line.strip()}` is not one `server ADDRESS [weight=N] ...;` "
                "line",
                hint="write one server directive a line, ending with `;  # NAME`",
            )
        comment = match["rest"].strip()
        name = (
            comment.lstrip("#").split()[0]
            if comment.startswith("#") and comment[1:].strip()
            else ""
        )
        if not _NAME.match(name):
            raise LoadBalancerError(
                f"{path}:{number}: server {match['address']} has no name",
                hint="end its line with a comment naming it, e.g. `server 10.0.0.1:8080 "
                "weight=10;  # web1` ([test] servers name servers so)",
            )
        tokens = match["params"].split()
        servers.append(
            UpstreamServer(name, match["address"], _weight_of(tokens, path, number), number)
        )
    doubled = sorted({s.name for s in servers if [t.name for t in servers].count(s.name) > 1})
    if doubled:
        raise LoadBalancerError(
            f"{path}: upstream {upstream} names {', '.join(doubled)} more than once",
            hint="give each server line a name of its own in its comment",
        )
    if not servers:
        raise LoadBalancerError(
            f"{path}: upstream {upstream} has no named server lines",
            hint="write one `server ADDRESS weight=N;  # NAME` line per server",
        )
    return servers


def _reweighted(tokens: list[str], weight: int) -> list[str]:
    """A server line's parameters with hairline's ``weight``: ``down`` for 0 (its
    ``weight=`` kept for when it comes back), else ``weight=N`` and no ``down``."""
    if weight == 0:
        return tokens if "down" in tokens else [*tokens, "down"]
    kept = [t for t in tokens if t != "down"]
    at = next((i for i, t in enumerate(kept) if t.startswith("weight=")), None)
    if at is None:
        # No weight= is weight 1: leave the line as written when it stays so.
        return kept if weight == 1 else [f"weight={weight}", *kept]
    return [*kept[:at], f"weight={weight}", *kept[at + 1 :]]


def with_weights(text: str, upstream: str, weights: Mapping[str, int], path: Path) -> str:
    """``text`` with the named servers of ``upstream`` at ``weights`` (the other servers
    and lines as they were). Pure: the file at ``path`` is named in messages only."""
    servers = {s.name: s for s in parse_upstream(text, upstream, path)}
    unknown = [name for name in weights if name not in servers]
    if unknown:
        raise LoadBalancerError(
            f"{path}: upstream {upstream} has no server {', '.join(unknown)} "
            f"(it has {', '.join(servers)})",
            hint="name the upstream's servers (their lines' comments) in [test] servers",
        )
    for name, weight in weights.items():
        if isinstance(weight, bool) or not isinstance(weight, int) or weight < 0:
            raise LoadBalancerError(
                f"weight {weight!r} for {upstream}/{name} is not a whole number from 0",
                hint="hairline weights are 0 (nginx's `down`) or whole numbers from 1",
            )
    lines = text.splitlines(keepends=True)
    for name, weight in weights.items():
        index = servers[name].line - 1
        line = lines[index]
        ending = line[len(line.rstrip("\r\n")) :]
        match = _SERVER.match(line.rstrip("\r\n"))
        assert match is not None  # parse_upstream matched it
        params = " ".join(_reweighted(match["params"].split(), weight))
        lines[index] = (
            f"{match['indent']}server {match['address']}{' ' + params if params else ''};"
            f"{match['rest']}{ending}"
        )
    return "".join(lines)


class NginxUpstream:
    """The weights of one ``upstream`` block of a running nginx, in the file that holds
    it (``upstream_file``, included by the main configuration ``config``)."""

    def __init__(
        self,
        config: Path | str,
        upstream_file: Path | str,
        upstream: str,
        *,
        nginx: Path = NGINX,
        reload_timeout_s: float = _RELOAD_TIMEOUT_S,
    ) -> None:
        self.config = Path(config)
        self.upstream_file = Path(upstream_file)
        self.upstream = upstream
        self.nginx = nginx
        self.reload_timeout_s = reload_timeout_s

    def describe(self) -> str:
        return f"nginx {self.config} upstream {self.upstream} ({self.upstream_file})"

    def weights(self) -> dict[str, int]:
        return {
            s.name: s.weight
            for s in parse_upstream(self._read(), self.upstream, self.upstream_file)
        }

    def addresses(self) -> dict[str, str]:
        return {
            s.name: s.address
            for s in parse_upstream(self._read(), self.upstream, self.upstream_file)
        }

    def set_weights(self, weights: Mapping[str, int]) -> None:
        """Rewrite the upstream file with ``weights`` and reload nginx; if nginx refuses the
        new file, the old one is put back and the error names nginx's complaint."""
        before = self._read()
        after = with_weights(before, self.upstream, weights, self.upstream_file)
        self._write(after)
        try:
            self.reload()
        except LoadBalancerError:
            self._write(before)
            raise

    def reload(self) -> None:
        """``nginx -c CONF -s reload`` (it checks the configuration first, then signals the
        master), and wait until the master has started new workers: they serve the new
        weights; the old ones finish their requests and leave."""
        pid = self._master_pid()
        if not Path(f"/proc/{pid}").exists():
            raise LoadBalancerGone(
                f"nginx's master (pid {pid}, from its pid file) is not running",
                hint=f"start nginx with -c {self.config}",
            )
        workers = _children(pid)
        try:
            done = subprocess.run(
                [str(self.nginx), "-c", str(self.config), "-s", "reload"],
                capture_output=True, text=True, timeout=self.reload_timeout_s,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as err:
            raise LoadBalancerError(
                f"cannot run `{self.nginx} -c {self.config} -s reload`: {err}",
                hint="check that nginx is installed (apt-get install nginx-light)",
            ) from err
        if done.returncode != 0:
            raise LoadBalancerError(
                f"nginx refused to reload {self.config}: {done.stderr.strip()[-1000:]}",
                hint=f"run `{self.nginx} -t -c {self.config}`; the weights are back as they "
                f"were in {self.upstream_file}",
            )
        # New workers serve the new weights; the old ones keep accepting until they have
        # the master's "quit" (it waits 100 ms after starting the new ones before it sends
        # it), and leave once their requests are done (idle kept-alive connections are
        # closed at once). So the old workers' exit is the sign that only the new weights
        # serve: under 1,500 requests/s here, new workers 7.5 ms after the reload command,
        # the old ones gone at 109 ms (medians of 20, docs/kraken.md).
        deadline = time.monotonic() + self.reload_timeout_s
        started = False
        while time.monotonic() < deadline:
            now = _children(pid)
            started = started or bool(now - workers)
            if started and not now & workers:
                return
            if not Path(f"/proc/{pid}").exists():
                break
            time.sleep(0.005)
        if started:
            return  # old workers finishing long requests; they no longer take new ones
        raise LoadBalancerError(
            f"nginx (master {pid}) started no new workers within {self.reload_timeout_s:g} s "
            f"of reloading {self.config}",
            hint="see nginx's error log for why (its `error_log`)",
        )

    def _read(self) -> str:
        try:
            return self.upstream_file.read_text()
        except OSError as err:
            raise (LoadBalancerGone if isinstance(err, FileNotFoundError) else LoadBalancerError)(
                f"cannot read nginx's upstream file {self.upstream_file}: {err.strerror}",
                hint="[lb] upstream_file names the file holding the upstream block, "
                "which the main configuration includes",
            ) from err

    def _write(self, text: str) -> None:
        # Atomic: nginx (or the watchdog) never reads half a file. A symlink's target is
        # rewritten, not the link; the file keeps its permissions.
        target = self.upstream_file.resolve()
        mode = stat.S_IMODE(target.stat().st_mode)
        with atomic_path(target) as tmp:
            tmp.write_text(text)
            os.chmod(tmp, mode)

    def _master_pid(self) -> int:
        try:
            text = self.config.read_text()
        except OSError as err:
            raise LoadBalancerError(
                f"cannot read nginx's configuration {self.config}: {err.strerror}",
                hint="[lb] config names nginx's main configuration (what `nginx -c` takes)",
            ) from err
        found = _PID_DIRECTIVE.search(text)
        pid_file = _PREFIX / found[1] if found else _DEFAULT_PID
        try:
            return int(pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError) as err:
            # nginx removes its pid file when it exits.
            gone = isinstance(err, FileNotFoundError)
            raise (LoadBalancerGone if gone else LoadBalancerError)(
                f"cannot read nginx's master pid from {pid_file}: {err}",
                hint=f"check that nginx runs with -c {self.config} (its `pid` directive "
                "names this file)",
            ) from err


def _children(pid: int) -> set[int]:
    """The processes whose parent is ``pid`` (an nginx master's workers)."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    try:
        return {int(p) for p in children.read_text().split()}
    except FileNotFoundError:
        pass
    except OSError:
        return set()
    # A kernel without /proc/PID/task/TID/children: every process's parent from its stat.
    found = set()
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[1] == str(pid):
            found.add(int(stat_file.parent.name))
    return found
