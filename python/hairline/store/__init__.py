"""Persistence: the observations files (Parquet or CSV) behind every analysis."""
