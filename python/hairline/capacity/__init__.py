"""Capacity mode's cores: how much load a build sustains. ``search``: the probe search for
the knee (pure); ``pid``: the PID controller that settles on the SLO's rate (pure). The lab
drives them (lab/capacity.py, lab/capacity_pid.py); Kraken is a package of its own.
"""
