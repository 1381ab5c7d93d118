"""The one place a load balancer is built: :func:`open_balancer` turns an :class:`LbSpec`
(the Kraken file's ``[lb]``, a local fleet's, or the watchdog's ``--lb``) into the backend
that implements :class:`~hairline.lb.balancer.LoadBalancer`. A new backend is a module
beside ``haproxy.py`` and ``nginx.py``, a kind in ``LbKind`` and a branch here.
"""

from __future__ import annotations

from hairline.errors import LoadBalancerError
from hairline.lb.balancer import LbSpec, LoadBalancer
from hairline.lb.haproxy import HAProxyRuntime
from hairline.lb.nginx import NginxUpstream

__all__ = ["open_balancer"]


def open_balancer(spec: LbSpec) -> LoadBalancer:
    """The backend ``spec`` names; a missing field is an error naming ``[lb]``'s."""
    if spec.kind == "haproxy":
        if spec.socket is None:
            raise _missing(spec, "socket", 'socket = "/run/haproxy/admin.sock"')
        return HAProxyRuntime(spec.socket, spec.backend)
    if spec.config is None:
        raise _missing(spec, "config", 'config = "/etc/nginx/nginx.conf"')
    if spec.upstream_file is None:
        raise _missing(spec, "upstream_file", 'upstream_file = "/etc/nginx/conf.d/web.conf"')
    return NginxUpstream(spec.config, spec.upstream_file, spec.backend)


def _missing(spec: LbSpec, field: str, example: str) -> LoadBalancerError:
    return LoadBalancerError(
        f"[lb] {field} is missing: a {spec.kind} load balancer needs it",
        hint=f"write {example} in the [lb] table, or run with --local-fleet N",
    )
