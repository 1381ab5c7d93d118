"""Tail-latency attribution (Treadmill): factorial experiments through the lab and quantile
regression of per-request latency on their factors."""
