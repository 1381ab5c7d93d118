"""Load balancers, the lever Kraken pulls: the ``LoadBalancer`` protocol and ``LbSpec``
(``balancer``), the one factory that builds a backend from a spec (``factory``), the
backends (``haproxy``: HAProxy's runtime API; ``nginx``: an upstream file and a graceful
reload) and starting either on loopback (``launch``).

Modules are imported by their own paths; this package re-exports nothing.
"""
