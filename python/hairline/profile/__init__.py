"""CPU profiles: folded stacks and pprof files read into one ``Profile`` (``formats``), for
the diff suggester's function costs and semantic routing's endpoint profiles.
"""
