"""The ``hairline`` command: one group, every subcommand thin.

Each module here turns one family of subcommands' options into typed values and calls into
the library: ``analysis`` (plan, analyze), ``lab`` (run, aa, status, report, demo, lab
process), ``agent`` (agent start/stop), ``traffic`` (trace ...), ``record``.
"""

from hairline.cli import agent, analysis, lab, record, traffic  # noqa: F401  (each module registers its commands)
from hairline.cli._base import EXIT_ERROR, EXIT_OK, EXIT_REGRESSION, main

__all__ = ["EXIT_ERROR", "EXIT_OK", "EXIT_REGRESSION", "main"]
