"""The bottom layer: kits every other package may use and that import nothing of hairline's
but ``errors``. ``procs``: starting and stopping child processes; ``secretfiles``: files
only their owner reads; ``jsonout``: JSON that is written whole or not at all.
"""
