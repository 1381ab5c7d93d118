"""An arm's network namespace: loopback, one veth link to the host, an nftables allow-list.

ServiceLab (sections 3.1, 5.3) lets a service under test reach nothing but an allow-list.
Each isolated arm gets a namespace of its own, named like its cgroup
(``<prefix><arm>-<port>``), with:

- ``lo`` up, and a veth pair: the host side ``10.213.N.1/30``, the namespace side
  ``10.213.N.2/30`` (the service's address), a default route via the host side. Veth names
  fit Linux's 15 characters by a hash of the namespace's name; the host side's alias is the
  namespace's name, so a sweep by prefix finds it.
- an nftables table in the namespace: established traffic passes; new connections come in
  only on the service's port from the host side; new connections go out only to the
  allow-list (the veth: its non-loopback destinations; ``lo``: the relayed loopback
  destinations, ``local_ports`` and the service's own port). Every other new connection is
  refused at once (TCP reset; ICMP port-unreachable for UDP) and counted per destination
  in a dynamic set with per-element counters, so a service is never left hanging on a
  denied destination and the report can say what it tried.
- where the allow-list names another machine, a table on the host that masquerades the
  namespace's traffic, and IPv4 forwarding on while any such namespace exists: when
  hairline turned it on, the last of them to go turns it off again (the namespaces that
  need it are listed in ``/run/hairline-forwarding``, under the same lock as the subnets).

Removing the namespace takes its veth pair and table with it; :func:`sweep_namespaces`
removes what a dead processor left, by prefix, as :func:`hairline.arms.cgroup.sweep` does
for cgroups.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import json
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType

from hairline.config.isolation import IsolationConfig, is_loopback, split_address
from hairline.errors import ArmFailed

__all__ = [
    "NETNS_DIR",
    "ArmNamespace",
    "leftovers",
    "namespace_rules",
    "netns_available",
    "sweep_namespaces",
]

NETNS_DIR = Path("/run/netns")
# 10.213.0.0/16, one /30 per namespace: N is the third octet (256 arms on one machine).
_SUBNET = "10.213"
_LOCK = Path("/run/hairline-netns.lock")
_IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
# The namespaces that need forwarding, one per line, after a first line saying what
# ip_forward was before hairline turned it on ("0" or "1").
_FORWARDING = Path("/run/hairline-forwarding")
_TABLE = "hairline"
_NAME_MAX = 200  # a namespace is a file in /run/netns; keep well under NAME_MAX


def _run(*args: str, stdin: str | None = None, check: bool = True) -> str:
    try:
        done = subprocess.run(
            list(args), input=stdin, capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ArmFailed(
            f"{args[0]} failed: {err}",
            hint="[service.isolation] needs iproute2 and nftables (apt-get install iproute2 "
            "nftables) and root; remove [service.isolation] to run without a namespace",
        ) from err
    if check and done.returncode != 0:
        raise ArmFailed(
            f"`{' '.join(args)}` failed: {done.stderr.strip() or done.returncode}",
            hint="[service.isolation] needs root (network namespaces and nftables); remove "
            "[service.isolation] from the service file to run without a namespace",
        )
    return done.stdout


def netns_available() -> str:
    """Why network namespaces cannot be made here ("" when they can)."""
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (apt-get install iproute2 nftables)"
    # A name of this process's own: two processes probing at once (two pytest workers in one
    # folder, two lab processors) with a name from the folder collided ("File exists") and
    # the second read that as "no namespaces here".
    probe = f"hlprobe-{os.getpid()}-{secrets.token_hex(3)}"
    done = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if done.returncode != 0:
        return f"`ip netns add` failed: {done.stderr.strip()} (run as root)"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return ""


def _table_name(name: str) -> str:
    """A host nftables table's name for a namespace (nft names take no '-' or '.')."""
    return "".join(c if c.isalnum() else "_" for c in name)


def _veth_names(name: str) -> tuple[str, str]:
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"hl{digest}h", f"hl{digest}n"


def _set(elements: Sequence[str]) -> str:
    return "{ " + ", ".join(elements) + " }"


def namespace_rules(isolation: IsolationConfig, *, port: int, veth: str, host_address: str) -> str:
    """The namespace's nftables table (``nft -f`` text); pure, so tests read it."""
    relayed = sorted(
        {a for a in isolation.allow if is_loopback(a)} | {h.address for h in isolation.http}
    )
    routed = sorted(a for a in isolation.allow if not is_loopback(a))
    lo_ports = sorted({port, *isolation.local_ports})

    def pairs(addresses: Sequence[str]) -> list[str]:
        return [f"{h} . {p}" for h, p in map(split_address, addresses)]

    output = ["ct state established,related accept"]
    output.append(f'oifname "lo" tcp dport {_set([str(p) for p in lo_ports])} accept')
    if relayed:
        output.append(f'oifname "lo" ip daddr . tcp dport {_set(pairs(relayed))} accept')
    if routed:
        output.append(f'oifname "{veth}" ip daddr . tcp dport {_set(pairs(routed))} accept')
    # Refused, not dropped: a dropped SYN leaves the service waiting for its timeout.
    output += [
        "meta nfproto ipv4 meta l4proto tcp add @denied4 { ip daddr . tcp dport } "
        "reject with tcp reset",
        "meta nfproto ipv4 meta l4proto udp add @denied4 { ip daddr . udp dport } reject",
        "meta nfproto ipv6 meta l4proto tcp add @denied6 { ip6 daddr . tcp dport } "
        "reject with tcp reset",
        "meta nfproto ipv6 meta l4proto udp add @denied6 { ip6 daddr . udp dport } reject",
        "reject",
    ]
    input_ = [
        "ct state established,related accept",
        'iifname "lo" accept',
        f'iifname "{veth}" ip saddr {host_address} tcp dport {port} accept',
        "meta l4proto tcp reject with tcp reset",
        "reject",
    ]
    lines = [
        f"table inet {_TABLE} {{",
        "  set denied4 { type ipv4_addr . inet_service; flags dynamic; counter; }",
        "  set denied6 { type ipv6_addr . inet_service; flags dynamic; counter; }",
        "  chain input {",
        "    type filter hook input priority 0; policy drop;",
        *(f"    {rule}" for rule in input_),
        "  }",
        "  chain output {",
        "    type filter hook output priority 0; policy drop;",
        *(f"    {rule}" for rule in output),
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """Two processors on one machine choose subnets one at a time."""
    with open(_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _used_subnets() -> set[int]:
    used: set[int] = set()
    for link in json.loads(_run("ip", "-j", "-4", "addr", "show") or "[]"):
        for info in link.get("addr_info", []):
            local = str(info.get("local", ""))
            if local.startswith(_SUBNET + "."):
                used.add(int(local.split(".")[2]))
    return used


class ArmNamespace:
    """One arm's namespace. A context manager; :meth:`create` and :meth:`remove` are
    idempotent, and a creation that fails halfway removes what it made."""

    def __init__(self, name: str, isolation: IsolationConfig, *, port: int) -> None:
        if len(name) > _NAME_MAX:
            digest = hashlib.sha256(name.encode()).hexdigest()[:12]
            name = name[: _NAME_MAX - 13] + "-" + digest
        self.name = name
        self.isolation = isolation
        self.port = port
        self.path = NETNS_DIR / name
        self.host_veth, self.ns_veth = _veth_names(name)
        self.subnet: int | None = None
        self._created = False
        self._denied: dict[str, int] = {}

    @property
    def address(self) -> str:
        """The service's address inside the namespace (the veth's namespace side)."""
        if self.subnet is None:
            raise RuntimeError(f"namespace {self.name} not created")
        return f"{_SUBNET}.{self.subnet}.2"

    @property
    def host_address(self) -> str:
        if self.subnet is None:
            raise RuntimeError(f"namespace {self.name} not created")
        return f"{_SUBNET}.{self.subnet}.1"

    def create(self) -> ArmNamespace:
        if self._created:
            return self
        self._created = True
        try:
            self._create()
        except BaseException:
            self.remove()
            raise
        return self

    def _create(self) -> None:
        name, host, ns = self.name, self.host_veth, self.ns_veth
        with _locked():
            used = _used_subnets()
            start = int(hashlib.sha256(name.encode()).hexdigest(), 16) % 256
            free = [n for n in (*range(start, 256), *range(start)) if n not in used]
            if not free:
                raise ArmFailed(
                    f"no free subnet in {_SUBNET}.0.0/16 for namespace {name}",
                    hint="256 isolated arms run on this machine already; stop some "
                    "(`ip netns list`)",
                )
            self.subnet = free[0]
            _run("ip", "netns", "add", name)
            _run("ip", "link", "add", host, "type", "veth", "peer", "name", ns, "netns", name)
            _run("ip", "link", "set", host, "alias", name)
            _run("ip", "addr", "add", f"{self.host_address}/30", "dev", host)
        _run("ip", "link", "set", host, "up")
        _run("ip", "-n", name, "link", "set", "lo", "up")
        _run("ip", "-n", name, "addr", "add", f"{self.address}/30", "dev", ns)
        _run("ip", "-n", name, "link", "set", ns, "up")
        _run("ip", "-n", name, "route", "add", "default", "via", self.host_address)
        rules = namespace_rules(
            self.isolation, port=self.port, veth=ns, host_address=self.host_address
        )
        _run("ip", "netns", "exec", name, "nft", "-f", "-", stdin=rules)
        if any(not is_loopback(a) for a in self.isolation.allow):
            self._masquerade()

    def _masquerade(self) -> None:
        """Replies from another machine find their way back to the namespace's address."""
        with _locked():
            before, users = _forwarding_users()
            if not users:
                before = _IP_FORWARD.read_text().strip() or "0"
            _FORWARDING.write_text("\n".join([before, *sorted(users | {self.name})]) + "\n")
            _IP_FORWARD.write_text("1\n")
        table = _table_name(self.name)
        _run(
            "nft", "-f", "-",
            stdin=f"table ip {table} {{\n  chain postrouting {{\n"
            "    type nat hook postrouting priority 100; policy accept;\n"
            f"    ip saddr {self.address} masquerade\n  }}\n}}\n",
        )  # fmt: skip

    def denied(self) -> dict[str, int]:
        """``"ip:port"`` -> refused connection attempts so far (the last reading once the
        namespace is removed)."""
        if not self._created or not self.path.exists():
            return dict(self._denied)
        found: dict[str, int] = {}
        for set_name in ("denied4", "denied6"):
            text = _run(
                "ip", "netns", "exec", self.name, "nft", "-j", "list", "set", "inet", _TABLE,
                set_name, check=False,
            )  # fmt: skip
            found.update(parse_denied(text))
        self._denied = found
        return dict(found)

    def remove(self) -> None:
        """Delete the namespace (its veth pair and table go with it) and whatever is left on
        the host. Safe to call twice, and after a creation that failed."""
        if self._created and self.path.exists():
            with contextlib.suppress(ArmFailed):
                self.denied()
        _remove(self.name, self.host_veth)
        self._created = False

    def __enter__(self) -> ArmNamespace:
        return self.create()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.remove()


def parse_denied(text: str) -> dict[str, int]:
    """``nft -j list set`` output -> ``"ip:port"`` -> packets counted (one per attempt:
    each refused SYN is answered by a reset, and the client gives up)."""
    if not text.strip():
        return {}
    found: dict[str, int] = {}
    for item in json.loads(text).get("nftables", []):
        for elem in item.get("set", {}).get("elem", []):
            inner = elem.get("elem", {}) if isinstance(elem, dict) else {}
            concat = inner.get("val", {}).get("concat", [])
            if len(concat) != 2:
                continue
            address = ipaddress.ip_address(concat[0])
            host = f"[{address}]" if address.version == 6 else str(address)
            packets = int(inner.get("counter", {}).get("packets", 0))
            found[f"{host}:{concat[1]}"] = packets
    return found


def _remove(name: str, host_veth: str) -> None:
    if (NETNS_DIR / name).exists():
        _run("ip", "netns", "del", name, check=False)
    # Gone with the namespace's side, unless a process still holds the namespace open.
    if Path(f"/sys/class/net/{host_veth}").exists():
        _run("ip", "link", "del", host_veth, check=False)
    if shutil.which("nft") is not None:
        _run("nft", "delete", "table", "ip", _table_name(name), check=False)
    _release_forwarding(name)


def _forwarding_users() -> tuple[str, set[str]]:
    """What ip_forward was before hairline, and the namespaces that need it now."""
    try:
        lines = _FORWARDING.read_text().split()
    except OSError:
        return "0", set()
    return (lines[0] if lines else "0"), set(lines[1:])


def _release_forwarding(name: str) -> None:
    """``name`` no longer needs forwarding; the last one restores what ip_forward was."""
    if not _FORWARDING.exists():
        return
    with _locked():
        before, users = _forwarding_users()
        if name not in users:
            return
        users.discard(name)
        if users:
            _FORWARDING.write_text("\n".join([before, *sorted(users)]) + "\n")
            return
        _FORWARDING.unlink(missing_ok=True)
        if before == "0":
            _IP_FORWARD.write_text("0\n")


def _host_tables(prefix: str) -> list[str]:
    if shutil.which("nft") is None:
        return []
    tables = json.loads(_run("nft", "-j", "list", "tables", "ip", check=False) or "{}")
    names = [str(item.get("table", {}).get("name", "")) for item in tables.get("nftables", [])]
    return [name for name in names if name.startswith(_table_name(prefix))]


def _aliased_links(prefix: str) -> dict[str, str]:
    """Host-side veths whose alias (their namespace's name) starts with ``prefix``: link
    name -> alias."""
    if shutil.which("ip") is None:
        return {}
    links = json.loads(_run("ip", "-j", "link", "show", check=False) or "[]")
    return {
        str(link["ifname"]): str(link["ifalias"])
        for link in links
        if str(link.get("ifalias", "")).startswith(prefix)
    }


def leftovers(prefix: str) -> list[str]:
    """What of ``prefix`` is on this machine: namespaces, host-side veths, host nftables
    tables (nothing, once every arm stopped or a sweep ran)."""
    found = sorted(p.name for p in NETNS_DIR.iterdir()) if NETNS_DIR.is_dir() else []
    return (
        [name for name in found if name.startswith(prefix)]
        + sorted(_aliased_links(prefix))
        + _host_tables(prefix)
    )


def sweep_namespaces(prefix: str) -> list[str]:
    """Remove every namespace, host-side veth (by its alias) and host nftables table whose
    name starts with ``prefix``; the names found. Nothing to do (and no error) on a machine
    without iproute2 or nftables."""
    found: set[str] = set()
    if NETNS_DIR.is_dir():
        found |= {p.name for p in NETNS_DIR.iterdir() if p.name.startswith(prefix)}
    found |= set(_aliased_links(prefix).values())
    for name in found:
        _remove(name, _veth_names(name)[0])
    for table in _host_tables(prefix):
        _run("nft", "delete", "table", "ip", table, check=False)
        found.add(table)
    return sorted(found)
