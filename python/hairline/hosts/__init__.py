"""Hosts: the machines (locally, CPU sets) arms run on, and the facts that make them alike."""
