"""Metric collectors: process CPU and memory from procfs, service counters from Prometheus."""
