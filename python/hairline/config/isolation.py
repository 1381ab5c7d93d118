"""``[service.isolation]``: what a service under test may reach from its network namespace.

ServiceLab (section 3.1, 5.3) blocks every connection of a service under test except an
allow-list, so that a test never writes to production. Here the allow-list names TCP
destinations as ``host:port``; a loopback one is relayed from the namespace's loopback to
the host's, so the service's own configuration does not change. Downstream HTTP services
named under ``[[service.isolation.http]]`` are reached through the egress proxy, which
forwards reads and answers writes itself (docs/safety.md).
"""

from __future__ import annotations

import ipaddress
import re

from pydantic import Field, field_validator

from hairline.config.sections import TomlModel

__all__ = ["HttpDownstreamConfig", "IsolationConfig", "is_loopback", "split_address"]

_METHOD = re.compile(r"^[A-Z]+$")


def split_address(text: str) -> tuple[str, int]:
    """``"127.0.0.1:5432"`` -> ``("127.0.0.1", 5432)``; ValueError saying what to write.

    Only IPv4 literals: the namespace's rules match addresses, and a name would be resolved
    once, at the wrong time, by the wrong resolver."""
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{text!r} has no port; write host:port, e.g. '127.0.0.1:5432'")
    try:
        address = ipaddress.IPv4Address(host)
    except ValueError:
        raise ValueError(
            f"{text!r}: {host!r} is not an IPv4 address; write the address, not a name "
            "(e.g. '10.0.0.5:5432')"
        ) from None
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"{text!r}: the port is not a number from 1 to 65535")
    return str(address), int(port)


def is_loopback(address: str) -> bool:
    """Whether ``host:port`` is on this machine's loopback (relayed, not routed)."""
    return ipaddress.IPv4Address(split_address(address)[0]).is_loopback


def _check_address(value: str) -> str:
    host, port = split_address(value)
    return f"{host}:{port}"


class HttpDownstreamConfig(TomlModel):
    """``[[service.isolation.http]]``: a downstream HTTP service reached through the egress
    proxy, which forwards ``forward`` (methods, or ``"METHOD /path"`` for one endpoint) and
    answers everything else with the synthetic response below, never forwarding it."""

    address: str
    """The downstream's ``host:port``."""
    forward: list[str] = Field(default_factory=lambda: ["GET", "HEAD"])
    """What is forwarded: methods ("GET"), or "METHOD /path" for one endpoint."""
    drop_status: int = Field(default=200, ge=200, le=599)
    """The status of the synthetic answer to a request not forwarded."""
    drop_body: str = "{}"
    """The body of the synthetic answer."""
    drop_content_type: str = Field(default="application/json", min_length=1)
    """The Content-Type of the synthetic answer."""

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        return _check_address(value)

    @field_validator("forward")
    @classmethod
    def _forward(cls, value: list[str]) -> list[str]:
        bad = []
        for index, rule in enumerate(value):
            method, _, path = rule.partition(" ")
            if not _METHOD.match(method) or (path and not path.startswith("/")):
                bad.append(f"forward[{index}]: {rule!r}")
        if bad:
            raise ValueError(
                "; ".join(bad) + ' is not a method or "METHOD /path"; write e.g. "GET" or '
                '"POST /v1/lookup" (methods in capitals)'
            )
        return value


class IsolationConfig(TomlModel):
    """``[service.isolation]``: the service runs in its own network namespace and may reach
    only ``allow``, its own ``local_ports`` and the ``http`` downstreams (docs/safety.md)."""

    allow: list[str] = Field(default_factory=list)
    """TCP destinations the service may reach, as IPv4 "address:port" (no names)."""
    local_ports: list[int] = Field(default_factory=list)
    """Ports the service's own processes serve to each other inside the namespace."""
    http: list[HttpDownstreamConfig] = Field(default_factory=list)
    """``[[service.isolation.http]]``: HTTP downstreams reached through the egress proxy."""

    @field_validator("allow")
    @classmethod
    def _allow(cls, value: list[str]) -> list[str]:
        checked, bad = [], []
        for index, text in enumerate(value):
            try:
                checked.append(_check_address(text))
            except ValueError as err:
                bad.append(f"allow[{index}]: {err}")
        if bad:
            raise ValueError("; ".join(bad))
        return checked

    @field_validator("local_ports")
    @classmethod
    def _local_ports(cls, value: list[int]) -> list[int]:
        bad = [f"local_ports[{i}]: {p}" for i, p in enumerate(value) if not 1 <= p <= 65535]
        if bad:
            raise ValueError("; ".join(bad) + " is not a port; write a number from 1 to 65535")
        return value

    def downstreams(self) -> list[str]:
        """Every ``host:port`` the service may reach (allow-list and HTTP downstreams),
        sorted and unique: what two experiments share when they touch the same service."""
        return sorted({*self.allow, *(h.address for h in self.http)})
