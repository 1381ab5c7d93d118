"""Capacity: how much load a build sustains (capacity mode's search), and Kraken load tests
that shift live traffic through load-balancer weights in a feedback loop on health metrics.

Modules are imported by their own paths (``hairline.capacity.health``...); this package
re-exports nothing, so that importing one piece never starts another's dependencies.
"""
