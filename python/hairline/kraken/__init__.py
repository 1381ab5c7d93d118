"""Kraken: load tests that shift live traffic to the servers under test through load-balancer
weights, in a feedback loop on health metrics (Kraken, OSDI'16).

``file``: the Kraken file; ``control`` and ``health``: the pure decision per interval;
``promql`` and ``series``: health metrics from Prometheus text; ``controller``: the loop
that reads health and moves weights; ``watchdog``: the process that puts the weights back
if the controller dies; ``run``: a whole test (server test, then cluster test); ``results``
and ``report``: what was measured and its charts; ``fleet``: ``--local-fleet N``, a cluster
on loopback. The balancer itself is reached only through ``hairline.lb``.

Modules are imported by their own paths; this package re-exports nothing.
"""
