"""Load balancers: the ``LoadBalancer`` protocol whose weights Kraken and semantic routing
move, HAProxy's runtime API (``haproxy``) and starting HAProxy on loopback (``launch``).
"""
