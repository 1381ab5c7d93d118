"""``python -m hairline``: the ``hairline`` command (what a ``{hairline}`` start command runs)."""

from hairline.cli import main

main()
