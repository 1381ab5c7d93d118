"""The ``hairline`` command: one group, every subcommand thin.

Each module here turns one family of subcommands' options into typed values and calls into
the library: ``analysis`` (plan, analyze), ``run`` (run, aa), ``experiments`` (status,
report, cancel), ``demo``, ``lab`` (lab process/quota/hosts/factors), ``schedule`` (lab
schedule ...), ``agent`` (agent start/stop), ``traffic`` (trace ...), ``record``,
``kraken``, ``serve``, ``ci`` (ci comment), ``web`` (token, service, gate), ``bisect``,
``tune`` (tune, tuning list/show), ``attribute``, ``route`` (route partition/fleet),
``history`` (a service's change points).
A module is imported when its command is looked up (``_base.COMMAND_MODULES``), so a
command pays only for what it uses.
"""

from hairline.cli._base import EXIT_ERROR, EXIT_OK, EXIT_REGRESSION, EXIT_WAITING, main

__all__ = ["EXIT_ERROR", "EXIT_OK", "EXIT_REGRESSION", "EXIT_WAITING", "main"]
