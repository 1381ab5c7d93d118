"""Semantic request routing (HHVM section 2.2): endpoints partitioned by the code they run,
an HAProxy router per partition, and a PID balancer of hosts."""
